"""Splitting data sets, and indexing folders of files by class, as Keras 3's dataset utilities."""

from __future__ import annotations

import os
import random

import numpy as np

from tapeflow import tree
from tapeflow.data.dataset import Dataset
from tapeflow.ops.array import one_hot
from tapeflow.utils.rng_utils import draw_seed


def split_dataset(dataset, left_size=None, right_size=None, shuffle: bool = False, seed=None, preferred_backend=None):
    """Two `tp.data.Dataset`s: the first `left_size` samples and the last `right_size`
    (ints count samples, floats are fractions; either may be None for "the rest").

    `dataset` is an array, a tuple or list of arrays of one length, or a `tp.data.Dataset`
    (whose elements are the samples). With `shuffle=True` the samples are shuffled first,
    in the order Keras's `random.seed(seed)` shuffle gives.

    >>> left, right = split_dataset(np.arange(10), left_size=0.8)
    >>> len(left), len(right), [int(v) for v in right]
    (8, 2, [8, 9])
    """
    if preferred_backend not in (None, "tapeflow"):
        raise ValueError(f'split_dataset: preferred_backend must be None or "tapeflow", got {preferred_backend!r}')
    if left_size is None and right_size is None:
        raise ValueError("split_dataset: give left_size or right_size (both are None)")
    samples = _samples(dataset)
    total = len(samples)
    order = list(range(total))
    if shuffle:
        random.Random(draw_seed() if seed is None else seed).shuffle(order)
    left, right = split_sizes(left_size, right_size, total)
    return _restore([samples[i] for i in order[:left]]), _restore([samples[i] for i in order[total - right :]])


def _samples(dataset) -> list:
    if isinstance(dataset, Dataset):
        return list(dataset.as_numpy_iterator())
    if isinstance(dataset, np.ndarray):
        return list(dataset)
    if isinstance(dataset, list | tuple):
        if not dataset:
            raise ValueError("split_dataset: dataset is an empty list; give a list or tuple of arrays")
        arrays = [np.asarray(a) for a in dataset]
        lengths = {a.shape[0] if a.ndim else None for a in arrays}
        if len(lengths) != 1 or None in lengths:
            raise ValueError(f"split_dataset: the arrays must have one length, got shapes {[a.shape for a in arrays]}")
        return list(zip(*arrays, strict=True))
    raise TypeError(
        f"split_dataset: dataset must be a tp.data.Dataset, an array or a list/tuple of arrays, "
        f"got {type(dataset).__name__}"
    )


def _restore(samples: list) -> Dataset:
    first = samples[0]
    flat = [tree.flatten(s) for s in samples]
    columns = [np.array(column) for column in zip(*flat, strict=True)]
    return Dataset.from_tensor_slices(tree.pack_sequence_as(first, columns) if not _is_leaf(first) else columns[0])


def _is_leaf(sample) -> bool:
    return not isinstance(sample, tuple | list | dict)


def split_sizes(left_size, right_size, total: int) -> tuple[int, int]:
    """The (left, right) sample counts split_dataset takes from `total` samples.

    >>> split_sizes(0.25, None, 10), split_sizes(None, 3, 10), split_sizes(2, 0.5, 10)
    ((2, 8), (7, 3), (2, 5))
    """
    for name, size in (("left_size", left_size), ("right_size", right_size)):
        if size is not None and type(size) not in (int, float):
            raise TypeError(f"split_dataset: {name} must be an int, a float or None, got {size!r}")
        if type(size) is int and not 0 < size < total or type(size) is float and not 0 < size < 1:
            raise ValueError(
                f"split_dataset: {name} must be an int in (0, {total}) or a float in (0, 1), got {name}={size}"
            )
    if type(left_size) is float and type(right_size) is float and left_size + right_size > 1:
        raise ValueError(f"split_dataset: left_size + right_size exceeds 1 ({left_size} + {right_size})")
    left = round(left_size * total) if type(left_size) is float else left_size
    right = round(right_size * total) if type(right_size) is float else right_size
    left = total - right if left is None else left
    right = total - left if right is None else right
    if left + right > total:
        raise ValueError(f"split_dataset: left ({left}) + right ({right}) samples exceed the {total} there are")
    if left == 0 or right == 0:
        raise ValueError(f"split_dataset: with {total} samples, left={left} and right={right} leave one side empty")
    return int(left), int(right)


# ------------------------------------------------------------------ folders of files
def index_directory(
    directory, labels, formats, class_names=None, shuffle=True, seed=None, follow_links=False, verbose=True
):
    """(file paths, integer labels or None, class names or None) of the files under
    `directory` whose names end with one of `formats`.

    With `labels="inferred"` each subfolder is a class (sorted by name, or in the order
    of `class_names`); files are listed folder by folder in sorted order, then shuffled
    with NumPy's `RandomState(seed)` as Keras does.
    """
    directory = os.fspath(directory)
    if not os.path.isdir(directory):
        raise ValueError(f"dataset_from_directory: {directory!r} is not a directory")
    if labels == "inferred":
        subdirs = [
            d
            for d in sorted(os.listdir(directory))
            if os.path.isdir(os.path.join(directory, d)) and not d.startswith(".")
        ]
        if class_names is not None:
            if not set(class_names) <= set(subdirs):
                raise ValueError(
                    f"dataset_from_directory: class_names {list(class_names)} do not match the subfolders "
                    f"of {directory!r}: {subdirs} (or a subset of them)"
                )
            subdirs = list(class_names)
    else:
        if class_names is not None:
            raise ValueError("dataset_from_directory: class_names can only be given with labels='inferred'")
        subdirs = [""]
    files, found_labels = [], []
    for index, subdir in enumerate(subdirs):
        folder = os.path.join(directory, subdir)
        for root, _, names in sorted(os.walk(folder, followlinks=follow_links), key=lambda entry: entry[0]):
            for name in sorted(names):
                if name.lower().endswith(formats):
                    files.append(os.path.join(directory, subdir, os.path.relpath(os.path.join(root, name), folder)))
                    found_labels.append(index)
    if labels == "inferred":
        label_array, names = np.asarray(found_labels, dtype="int32"), subdirs
    elif labels is None:
        label_array, names = None, None
    else:
        if len(labels) != len(files):
            raise ValueError(
                f"dataset_from_directory: {len(labels)} labels given for the {len(files)} files in {directory!r}"
            )
        label_array, names = list(labels), [str(label) for label in sorted(set(labels))]
    if verbose:
        found = "" if label_array is None else f" belonging to {len(names)} classes"
        print(f"Found {len(files)} files{found}.")
    if shuffle:
        seed = draw_seed() if seed is None else seed
        np.random.RandomState(seed).shuffle(files)
        if label_array is not None:
            np.random.RandomState(seed).shuffle(label_array)
    return files, label_array, names


def check_validation_split(validation_split, subset, shuffle, seed) -> None:
    """The errors Keras raises for inconsistent validation_split / subset / seed."""
    if validation_split and not 0 < validation_split < 1:
        raise ValueError(f"dataset_from_directory: validation_split must be in (0, 1), got {validation_split}")
    if bool(validation_split) != bool(subset):
        raise ValueError("dataset_from_directory: subset and validation_split must be given together")
    if subset not in ("training", "validation", "both", None):
        raise ValueError(f'dataset_from_directory: subset must be "training", "validation" or "both", got {subset!r}')
    if validation_split and shuffle and seed is None:
        raise ValueError(
            "dataset_from_directory: with validation_split and shuffle, give a seed so that the training and "
            "validation subsets do not overlap"
        )


def take_subset(paths, labels, validation_split, subset):
    """The training (first) or validation (last `validation_split` share) part of the files."""
    if not validation_split:
        return paths, labels
    held_out = int(validation_split * len(paths))
    if subset == "training":
        print(f"Using {len(paths) - held_out} files for training.")
        return paths[: len(paths) - held_out], None if labels is None else labels[: len(paths) - held_out]
    print(f"Using {held_out} files for validation.")
    return paths[len(paths) - held_out :], None if labels is None else labels[len(paths) - held_out :]


def encode_labels(labels, label_mode, num_classes: int) -> np.ndarray:
    """Labels as label_mode wants them: int32 ("int"), float32 one-hot ("categorical") or
    a float32 column of 0/1 ("binary")."""
    labels = np.asarray(labels)
    if label_mode == "binary":
        return labels.astype("float32")[:, None]
    if label_mode == "categorical":
        return np.asarray(one_hot(labels.astype("int64"), num_classes).numpy(), dtype="float32")
    return labels.astype("int32")


def from_directory_dataset(paths, labels, load, batch_size, shuffle, seed, label_mode, num_classes) -> Dataset:
    """A dataset of `load(path)` (with encoded labels unless label_mode is None), shuffled
    through a buffer of 8 batches and batched, as Keras builds it."""
    if label_mode:
        dataset = Dataset.from_tensor_slices((np.asarray(paths), encode_labels(labels, label_mode, num_classes)))
        dataset_map = lambda path, label: (load(str(path)), label)  # noqa: E731
    else:
        dataset = Dataset.from_tensor_slices(np.asarray(paths))
        dataset_map = lambda path: load(str(path))  # noqa: E731
    if shuffle:
        dataset = dataset.shuffle(batch_size * 8 if batch_size is not None else 1024, seed=seed)
    dataset = dataset.map(dataset_map)
    return dataset if batch_size is None else dataset.batch(batch_size)


def directory_datasets(owner: str, what: str, directory, paths, labels, class_names, load, options: dict):
    """The dataset (or, for subset="both", the [training, validation] pair) of files a
    `*_dataset_from_directory` indexed, each with its `class_names` and `file_paths`.
    `options` holds the caller's validation_split, subset, batch_size, shuffle, seed and
    label_mode."""

    def build(subset_name, shuffled):
        subset_paths, subset_labels = take_subset(paths, labels, options["validation_split"], subset_name)
        if not subset_paths:
            raise ValueError(f"{owner}: no {what} found in {directory!r}")
        dataset = from_directory_dataset(
            subset_paths,
            subset_labels,
            load,
            options["batch_size"],
            shuffled,
            options["seed"],
            options["label_mode"],
            len(class_names or ()),
        )
        dataset.class_names, dataset.file_paths = class_names, list(subset_paths)
        return dataset

    if options["subset"] == "both":
        return [build("training", options["shuffle"]), build("validation", False)]
    return build(options["subset"], options["shuffle"])


def label_arguments(owner: str, labels, label_mode, class_names) -> tuple:
    """`labels` and `label_mode` checked as Keras's directory loaders check them; both
    become None when either is (unlabelled data)."""
    if labels not in ("inferred", None):
        if not isinstance(labels, list | tuple):
            raise ValueError(
                f"{owner}: labels must be 'inferred', None or a list/tuple of integer labels, got {labels!r}"
            )
        if class_names:
            raise ValueError(f"{owner}: class_names can only be given with labels='inferred'")
    if label_mode not in ("int", "categorical", "binary", None):
        raise ValueError(f"{owner}: label_mode must be 'int', 'categorical', 'binary' or None, got {label_mode!r}")
    if labels is None or label_mode is None:
        return None, None
    return labels, label_mode


def check_binary_classes(owner: str, label_mode, class_names) -> None:
    if label_mode == "binary" and len(class_names) != 2:
        raise ValueError(f'{owner}: label_mode="binary" needs exactly 2 classes, got {class_names}')
