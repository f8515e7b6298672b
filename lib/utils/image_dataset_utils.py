"""A labelled image dataset from a folder of class subfolders, as Keras 3's
`image_dataset_from_directory` (read with Pillow, resized in NumPy)."""

from __future__ import annotations

import numpy as np

from tapeflow.backend.config import standardize_data_format
from tapeflow.utils import dataset_utils
from tapeflow.utils.image_utils import _pil, resize_image
from tapeflow.utils.rng_utils import draw_seed

IMAGE_FORMATS = (".bmp", ".gif", ".jpeg", ".jpg", ".png")
_CHANNELS = {"grayscale": 1, "rgb": 3, "rgba": 4}


def image_dataset_from_directory(
    directory,
    labels="inferred",
    label_mode="int",
    class_names=None,
    color_mode="rgb",
    batch_size=32,
    image_size=(256, 256),
    shuffle=True,
    seed=None,
    validation_split=None,
    subset=None,
    interpolation="bilinear",
    follow_links=False,
    crop_to_aspect_ratio=False,
    pad_to_aspect_ratio=False,
    data_format=None,
    format="tf",
    verbose=True,
):
    """Batches of (images, labels) from `directory/<class name>/*.png` (and .jpg, .jpeg,
    .bmp, .gif), images as float32 (batch, height, width, channels) arrays.

    The dataset has `class_names` and `file_paths` attributes. `subset="both"` returns
    the (training, validation) pair. `format` is accepted for Keras scripts: "tf" and
    "grain" both give a `tp.data.Dataset`.

    >>> import os, tempfile
    >>> import tapeflow as tp
    >>> root = tempfile.mkdtemp()
    >>> for name in ("cat", "dog"):
    ...     os.mkdir(os.path.join(root, name))
    ...     tp.utils.save_img(os.path.join(root, name, "a.png"), np.zeros((5, 5, 3)))
    >>> ds = tp.utils.image_dataset_from_directory(root, image_size=(4, 4), batch_size=2, seed=1)
    Found 2 files belonging to 2 classes.
    >>> images, labels = next(iter(ds))
    >>> images.shape, sorted(labels.tolist()), ds.class_names
    ((2, 4, 4, 3), [0, 1], ['cat', 'dog'])
    """
    labels, label_mode = dataset_utils.label_arguments("image_dataset_from_directory", labels, label_mode, class_names)
    if color_mode not in _CHANNELS:
        raise ValueError(
            f"image_dataset_from_directory: color_mode must be one of {list(_CHANNELS)}, got {color_mode!r}"
        )
    if isinstance(image_size, int):
        image_size = (image_size, image_size)
    if not isinstance(image_size, list | tuple) or len(image_size) != 2:
        raise ValueError(f"image_dataset_from_directory: image_size must be 2 integers, got {image_size!r}")
    interpolation = interpolation.lower()
    if interpolation not in ("bilinear", "nearest"):
        raise ValueError(
            f"image_dataset_from_directory: interpolation must be 'bilinear' or 'nearest', got {interpolation!r}"
        )
    if crop_to_aspect_ratio and pad_to_aspect_ratio:
        raise ValueError("image_dataset_from_directory: give only one of crop_to_aspect_ratio and pad_to_aspect_ratio")
    if format not in ("tf", "grain"):
        raise ValueError(f'image_dataset_from_directory: format must be "tf" or "grain", got {format!r}')
    dataset_utils.check_validation_split(validation_split, subset, shuffle, seed)
    _pil()  # fail early, before indexing, when Pillow is missing
    seed = draw_seed() if seed is None else seed
    paths, labels, class_names = dataset_utils.index_directory(
        directory, labels, IMAGE_FORMATS, class_names, shuffle, seed, follow_links, verbose
    )
    dataset_utils.check_binary_classes("image_dataset_from_directory", label_mode, class_names)
    data_format = standardize_data_format(data_format)

    def load(path):
        return load_image(
            path,
            image_size,
            _CHANNELS[color_mode],
            interpolation,
            data_format,
            crop_to_aspect_ratio,
            pad_to_aspect_ratio,
        )

    options = {
        "validation_split": validation_split,
        "subset": subset,
        "batch_size": batch_size,
        "shuffle": shuffle,
        "seed": seed,
        "label_mode": label_mode,
    }
    what = f"images ({', '.join(IMAGE_FORMATS)})"
    return dataset_utils.directory_datasets(
        "image_dataset_from_directory", what, directory, paths, labels, class_names, load, options
    )


def load_image(path, image_size, channels, interpolation, data_format, crop_to_aspect_ratio, pad_to_aspect_ratio):
    """One image file as a float32 array of `image_size`, with `channels` channels."""
    img = _pil().open(path)
    mode = {1: "L", 3: "RGB", 4: "RGBA"}[channels]
    if img.mode != mode and not (channels == 1 and img.mode in ("I;16", "I")):
        img = img.convert(mode)
    array = np.asarray(img, dtype="float32")
    if array.ndim == 2:
        array = array[:, :, None]
    array = resize_image(array, image_size, interpolation, crop_to_aspect_ratio, pad_to_aspect_ratio)
    array = array.astype("float32")
    return array.transpose(2, 0, 1) if data_format == "channels_first" else array
