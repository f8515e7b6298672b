"""A labelled text dataset from a folder of class subfolders of .txt files, as Keras 3's
`text_dataset_from_directory`."""

from __future__ import annotations

from tapeflow.utils import dataset_utils
from tapeflow.utils.rng_utils import draw_seed


def text_dataset_from_directory(
    directory,
    labels="inferred",
    label_mode="int",
    class_names=None,
    batch_size=32,
    max_length=None,
    shuffle=True,
    seed=None,
    validation_split=None,
    subset=None,
    follow_links=False,
    format="tf",
    verbose=True,
):
    """Batches of (texts, labels) from `directory/<class name>/*.txt`; texts are str
    arrays (cut to `max_length` characters when given).

    >>> import os, tempfile
    >>> import tapeflow as tp
    >>> root = tempfile.mkdtemp()
    >>> for name, text in (("neg", "bad"), ("pos", "good")):
    ...     os.mkdir(os.path.join(root, name))
    ...     with open(os.path.join(root, name, "1.txt"), "w") as f:
    ...         _ = f.write(text)
    >>> ds = tp.utils.text_dataset_from_directory(root, shuffle=False, verbose=False)
    >>> texts, labels = next(iter(ds))
    >>> texts.tolist(), labels.tolist(), ds.class_names
    (['bad', 'good'], [0, 1], ['neg', 'pos'])
    """
    labels, label_mode = dataset_utils.label_arguments("text_dataset_from_directory", labels, label_mode, class_names)
    dataset_utils.check_validation_split(validation_split, subset, shuffle, seed)
    seed = draw_seed() if seed is None else seed
    paths, labels, class_names = dataset_utils.index_directory(
        directory, labels, (".txt",), class_names, shuffle, seed, follow_links, verbose
    )
    dataset_utils.check_binary_classes("text_dataset_from_directory", label_mode, class_names)

    def load(path):
        with open(path, encoding="utf-8") as f:
            text = f.read()
        return text[:max_length] if max_length is not None else text

    options = {
        "validation_split": validation_split,
        "subset": subset,
        "batch_size": batch_size,
        "shuffle": shuffle,
        "seed": seed,
        "label_mode": label_mode,
    }
    return dataset_utils.directory_datasets(
        "text_dataset_from_directory", ".txt files", directory, paths, labels, class_names, load, options
    )
