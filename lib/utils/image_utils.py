"""Images as arrays and back, through Pillow, as Keras 3's image utilities; and the
resizing `image_dataset_from_directory` applies (half-pixel bilinear or nearest, as
`keras.ops.image.resize`), in NumPy."""

from __future__ import annotations

import importlib
import io
import pathlib
import warnings

import numpy as np

from tapeflow.backend.config import floatx, standardize_data_format

RESIZE_INTERPOLATIONS = ("bilinear", "nearest")


def _pil():
    """Pillow's Image module, or an ImportError saying what to install."""
    try:
        return importlib.import_module("PIL.Image")
    except ImportError as err:
        raise ImportError("tapeflow.utils image functions need Pillow: pip install pillow") from err


def array_to_img(x, data_format=None, scale: bool = True, dtype=None):
    """A PIL image from a (height, width, channels) array; `scale` maps its range to 0..255.

    >>> array_to_img(np.zeros((2, 3, 3))).size
    (3, 2)
    """
    image = _pil()
    data_format = standardize_data_format(data_format)
    x = np.asarray(x, dtype=dtype or floatx())
    if x.ndim != 3:
        raise ValueError(f"array_to_img: expected a rank-3 image array, got shape {x.shape}")
    if data_format == "channels_first":
        x = x.transpose(1, 2, 0)
    if scale:
        x = x - np.min(x)
        top = np.max(x)
        if top != 0:
            x /= top
        x *= 255
    channels = x.shape[2]
    if channels in (3, 4):
        return image.fromarray(x.astype("uint8"), "RGB" if channels == 3 else "RGBA")
    if channels == 1:
        if np.max(x) > 255:
            return image.fromarray(x[:, :, 0].astype("int32"), "I")
        return image.fromarray(x[:, :, 0].astype("uint8"), "L")
    raise ValueError(f"array_to_img: unsupported number of channels {channels}; expected 1, 3 or 4")


def img_to_array(img, data_format=None, dtype=None) -> np.ndarray:
    """A (height, width, channels) array (floatx by default) from a PIL image.

    >>> img_to_array(array_to_img(np.ones((2, 3, 1)), scale=False)).shape
    (2, 3, 1)
    """
    data_format = standardize_data_format(data_format)
    x = np.asarray(img, dtype=dtype or floatx())
    if x.ndim == 2:
        x = x[:, :, None]
    elif x.ndim != 3:
        raise ValueError(f"img_to_array: unsupported image shape {x.shape}")
    return x.transpose(2, 0, 1) if data_format == "channels_first" else x


def save_img(path, x, data_format=None, file_format=None, scale: bool = True, **kwargs) -> None:
    """Write an image array to `path` (the format from its suffix unless `file_format`)."""
    data_format = standardize_data_format(data_format)
    if file_format is None and isinstance(path, str | pathlib.Path):
        file_format = pathlib.Path(path).suffix[1:].lower()
    if file_format and file_format.lower() == "jpg":
        file_format = "jpeg"
    img = array_to_img(x, data_format=data_format, scale=scale)
    if img.mode == "RGBA" and file_format == "jpeg":
        warnings.warn("save_img: JPEG holds no alpha channel; the image is saved as RGB", stacklevel=2)
        img = img.convert("RGB")
    img.save(path, format=file_format, **kwargs)


_COLOR_MODES = {"grayscale": ("L", ("L", "I;16", "I")), "rgb": ("RGB", ("RGB",)), "rgba": ("RGBA", ("RGBA",))}


def load_img(path, color_mode="rgb", target_size=None, interpolation="nearest", keep_aspect_ratio=False):
    """A PIL image read from a file (or `io.BytesIO`), converted to `color_mode` and, with
    `target_size=(height, width)`, resized by Pillow (centre-cropped first to the target's
    aspect ratio with `keep_aspect_ratio=True`).

    >>> import os, tempfile
    >>> path = os.path.join(tempfile.mkdtemp(), "x.png")
    >>> save_img(path, np.zeros((4, 6, 3)))
    >>> load_img(path, color_mode="grayscale", target_size=(2, 3)).size
    (3, 2)
    """
    image = _pil()
    if color_mode not in _COLOR_MODES:
        raise ValueError(f'load_img: color_mode must be "grayscale", "rgb" or "rgba", got {color_mode!r}')
    if isinstance(path, io.BytesIO):
        img = image.open(path)
    elif isinstance(path, pathlib.Path | bytes | str):
        with open(str(pathlib.Path(path).resolve()) if isinstance(path, pathlib.Path) else path, "rb") as f:
            img = image.open(io.BytesIO(f.read()))
    else:
        raise TypeError(f"load_img: path must be path-like or io.BytesIO, got {type(path).__name__}")
    target_mode, kept_modes = _COLOR_MODES[color_mode]
    if img.mode not in kept_modes:
        img = img.convert(target_mode)
    if target_size is None:
        return img
    resampling = {
        name: getattr(image.Resampling, name.upper())
        for name in ("nearest", "bilinear", "bicubic", "hamming", "box", "lanczos")
    }
    width_height = (target_size[1], target_size[0])
    if img.size == width_height:
        return img
    if interpolation not in resampling:
        raise ValueError(f"load_img: interpolation must be one of {sorted(resampling)}, got {interpolation!r}")
    box = None
    if keep_aspect_ratio:
        width, height = img.size
        crop_height = min(height, width * width_height[1] // width_height[0])
        crop_width = min(width, height * width_height[0] // width_height[1])
        top, left = (height - crop_height) // 2, (width - crop_width) // 2
        box = [left, top, left + crop_width, top + crop_height]
    return img.resize(width_height, resampling[interpolation], box=box)


def resize_image(
    img: np.ndarray, size, interpolation="bilinear", crop_to_aspect_ratio=False, pad_to_aspect_ratio=False
) -> np.ndarray:
    """A (height, width, channels) float array resized to `size`, optionally centre-cropped
    or zero-padded to the target's aspect ratio first.

    >>> resize_image(np.arange(4.0).reshape(2, 2, 1), (4, 4))[:, :, 0][0].tolist()
    [0.0, 0.25, 0.75, 1.0]
    """
    if interpolation not in RESIZE_INTERPOLATIONS:
        raise ValueError(f"resize: interpolation must be one of {RESIZE_INTERPOLATIONS}, got {interpolation!r}")
    if crop_to_aspect_ratio and pad_to_aspect_ratio:
        raise ValueError("resize: give only one of crop_to_aspect_ratio and pad_to_aspect_ratio")
    height, width = img.shape[:2]
    target_height, target_width = size
    if crop_to_aspect_ratio:
        crop_height = max(min(height, int(width * target_height / target_width)), 1)
        crop_width = max(min(width, int(height * target_width / target_height)), 1)
        top, left = (height - crop_height) // 2, (width - crop_width) // 2
        img = img[top : top + crop_height, left : left + crop_width]
    elif pad_to_aspect_ratio:
        pad_height = max(height, int(width * target_height / target_width))
        pad_width = max(width, int(height * target_width / target_height))
        top, left = (pad_height - height) // 2, (pad_width - width) // 2
        img = np.pad(img, ((top, top), (left, left), (0, 0)))
    return _resize_axis(_resize_axis(img, target_height, 0, interpolation), target_width, 1, interpolation)


def _resize_axis(img: np.ndarray, size: int, axis: int, interpolation: str) -> np.ndarray:
    n = img.shape[axis]
    if n == size:
        return img
    scale = n / size
    if interpolation == "nearest":
        index = np.minimum(np.floor(np.arange(size) * scale).astype(np.int64), n - 1)
        return np.take(img, index, axis=axis)
    centre = np.maximum((np.arange(size) + 0.5) * scale - 0.5, 0.0)
    low = np.minimum(np.floor(centre).astype(np.int64), n - 1)
    high = np.minimum(low + 1, n - 1)
    weight = (centre - low).reshape([-1 if a == axis else 1 for a in range(img.ndim)])
    return np.take(img, low, axis=axis) * (1 - weight) + np.take(img, high, axis=axis) * weight
