"""PyDataset: batches written in Python, one `__getitem__(index)` per batch, as Keras 3's
`keras.utils.PyDataset` (`Sequence` is its older name).

A subclass returns a whole batch from `__getitem__`: `x`, `(x,)`, `(x, y)` or
`(x, y, sample_weight)`, and says how many batches there are with `__len__` (or the
`num_batches` property; None for an endless one). `fit` calls `on_epoch_begin` and
`on_epoch_end` around each epoch and, with `shuffle=True`, visits the batches in a new
order each epoch.

>>> import numpy as np
>>> class Squares(PyDataset):
...     def __len__(self):
...         return 2
...     def __getitem__(self, index):
...         x = np.arange(3.0) + 3 * index
...         return x, x**2
>>> [y.tolist() for _, y in Squares()]
[[0.0, 1.0, 4.0], [9.0, 16.0, 25.0]]
"""

from __future__ import annotations

import itertools
from collections.abc import Iterator


class PyDataset:
    """Base class of a data set whose batches Python code makes, index by index.

    Args:
        workers: how many threads or processes Keras would use to prepare batches; the
            batches are made in the training thread here, so the data are the same.
        use_multiprocessing: Keras' choice of processes over threads (kept for scripts).
        max_queue_size: how many batches Keras would prepare ahead (kept for scripts).
    """

    def __init__(self, workers: int = 1, use_multiprocessing: bool = False, max_queue_size: int = 10):
        for name, value in (("workers", workers), ("max_queue_size", max_queue_size)):
            if isinstance(value, bool) or not isinstance(value, int) or value < 0:
                raise ValueError(f"PyDataset: {name} must be an integer >= 0, got {value!r}")
        self.workers = workers
        self.use_multiprocessing = bool(use_multiprocessing)
        self.max_queue_size = max_queue_size

    def __getitem__(self, index: int):
        """The batch at `index`: x, (x,), (x, y) or (x, y, sample_weight)."""
        raise NotImplementedError(f"{type(self).__name__}: a PyDataset must define __getitem__(index)")

    @property
    def num_batches(self) -> int | None:
        """How many batches there are (`len(self)`), or None for an endless data set."""
        if hasattr(type(self), "__len__"):
            return len(self)
        raise NotImplementedError(
            f"{type(self).__name__}: a PyDataset must define __len__ or the num_batches property "
            "(None for an endless one)"
        )

    def __iter__(self) -> Iterator:
        count = self.num_batches
        for index in itertools.count() if count is None else range(count):
            yield self[index]

    def on_epoch_begin(self) -> None:
        """Called by `fit` before each epoch."""

    def on_epoch_end(self) -> None:
        """Called by `fit` after each epoch."""


Sequence = PyDataset
