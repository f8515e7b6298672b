"""Where replicas read a shard's rows: arrays copied to their workers once, or a
`tp.data.Dataset` of (x, y) batches that every replica runs itself.

Rows are numbered by their position in the epoch's stream of batches. With a Dataset,
each replica makes its own pass over the epoch and keeps, of each batch, the rows of
its shard (tf.data's "DATA" auto-sharding policy: every worker runs the whole input
pipeline and discards what is not its share). The client makes one pass too, before
the replicas start, for the batch sizes (the epoch's plan) and the labels (the
metrics); a replica checks that its batches have the client's sizes and labels, so a
pipeline that gives other batches on another pass is a clear error, not silently
different training.

>>> import numpy as np
>>> import tapeflow as tp
>>> ds = tp.data.Dataset.from_tensor_slices((np.arange(5.0)[:, None], np.arange(5))).batch(2)
>>> stream = EpochStream.scan(ds)
>>> stream.sizes, stream.labels.tolist()
((2, 2, 1), [0, 1, 2, 3, 4])
>>> x, y = rows_reader(stream).take(np.array([3]))  # the second row of the second batch
>>> x.tolist(), y.tolist()
([[3.0]], [3])
"""

from __future__ import annotations

import copy

import numpy as np

from tapeflow.data.dataset import Dataset


class EpochStream:
    """One epoch of a Dataset as the replicas read it: the pipeline as it stood before
    the client's pass, and that pass's batch sizes and labels."""

    def __init__(self, dataset: Dataset, sizes: tuple[int, ...], labels: np.ndarray):
        self.dataset, self.sizes, self.labels = dataset, sizes, labels

    @classmethod
    def scan(cls, dataset: Dataset) -> EpochStream:
        """The next epoch of `dataset`: a copy of the pipeline for the replicas, then one pass
        here (which moves `dataset` on, as an epoch of single-process `fit` does)."""
        unread = copy.deepcopy(dataset)
        sizes, labels = [], []
        for k, batch in enumerate(dataset.as_numpy_iterator()):
            x, y = split_batch(batch, k)
            sizes.append(len(y))
            labels.append(y)
        if not sizes:
            raise ValueError("fit: the Dataset given with distribute= yielded no batches")
        return cls(unread, tuple(sizes), np.concatenate(labels))


def first_batch(dataset: Dataset):
    """(x, y) of the first batch of `dataset`, read from a copy so `dataset` stays where it is."""
    for batch in copy.deepcopy(dataset).as_numpy_iterator():
        return split_batch(batch, 0)
    raise ValueError("fit: the Dataset given with distribute= yielded no batches")


def split_batch(batch, k: int):
    """(x, y) of a Dataset element: x an array or a tuple of arrays with y's rows."""
    if not isinstance(batch, tuple | list) or len(batch) != 2:
        raise ValueError(
            f"fit: with distribute=, a Dataset must yield (x, y) batches; batch {k} is {type(batch).__name__} "
            f"of {len(batch) if isinstance(batch, tuple | list) else 1} parts"
        )
    x, y = batch
    y = np.asarray(y)
    x = tuple(np.asarray(a) for a in x) if isinstance(x, tuple | list) else np.asarray(x)
    rows = {a.shape[0] if a.ndim else None for a in (*(x if isinstance(x, tuple) else (x,)), y)}
    if len(rows) != 1 or None in rows:
        raise ValueError(f"fit: batch {k} of the Dataset has inputs and labels of different lengths {sorted(rows)}")
    return x, y


def rows_reader(data):
    """A reader of rows by epoch position: `ArrayRows` for [x..., y], `StreamRows` for an EpochStream."""
    return StreamRows(data) if isinstance(data, EpochStream) else ArrayRows(data)


class ArrayRows:
    """Rows of arrays [x, y] or [x_0, ..., x_k, y], in any order."""

    def __init__(self, data: list):
        self.x = data[0] if len(data) == 2 else tuple(data[:-1])
        self.y = data[-1]

    def take(self, rows: np.ndarray):
        return take_rows(self.x, rows), self.y[rows]


class StreamRows:
    """Rows of an epoch's batches, read in increasing order from a pass over the pipeline."""

    def __init__(self, stream: EpochStream):
        self.stream = stream
        self.batches = stream.dataset.as_numpy_iterator()
        self.index, self.start, self.stop = -1, 0, 0
        self.x = self.y = None

    def take(self, rows: np.ndarray):
        """The rows `rows` (ascending, all in one batch, none before those taken last)."""
        first = int(rows[0])
        while first >= self.stop:
            self._next_batch()
        if first < self.start or int(rows[-1]) >= self.stop:
            raise ValueError(f"replica: rows {first}..{int(rows[-1])} are not all in batch {self.index}")
        local = rows - self.start
        return take_rows(self.x, local), self.y[local]

    def _next_batch(self) -> None:
        self.index += 1
        sizes, k = self.stream.sizes, self.index
        try:
            batch = next(self.batches)
        except StopIteration:
            raise ValueError(
                f"replica: the Dataset ended after {k} batches here but gave {len(sizes)} on the client; "
                "a Dataset trained with distribute= must give the same batches on every pass"
            ) from None
        self.x, self.y = split_batch(batch, k)
        self.start, self.stop = self.stop, self.stop + len(self.y)
        labels = self.stream.labels[self.start : self.stop]
        if k >= len(sizes) or len(self.y) != sizes[k] or not np.array_equal(self.y, labels):
            raise ValueError(
                f"replica: batch {k} of the Dataset differs here from the client's pass over the same epoch; "
                "a Dataset trained with distribute= must give the same batches, in the same order, on every pass"
            )


def take_rows(x, rows: np.ndarray):
    """Rows of an array, or of each array of a tuple."""
    return tuple(a[rows] for a in x) if isinstance(x, tuple) else x[rows]
