"""Sliding windows over a timeseries as a batched `tp.data.Dataset`, as Keras 3's
`timeseries_dataset_from_array`."""

from __future__ import annotations

import numpy as np

from tapeflow.data.dataset import Dataset
from tapeflow.utils.rng_utils import draw_seed


def _check(name: str, value, low: int, data_length: int) -> None:
    if value < low:
        raise ValueError(f"timeseries_dataset_from_array: {name} must be >= {low}, got {name}={value}")
    if value >= data_length:
        raise ValueError(
            f"timeseries_dataset_from_array: {name} must be lower than the length of the data "
            f"({data_length}), got {name}={value}"
        )


def timeseries_dataset_from_array(
    data,
    targets,
    sequence_length: int,
    sequence_stride: int = 1,
    sampling_rate: int = 1,
    batch_size: int | None = 128,
    shuffle: bool = False,
    seed: int | None = None,
    start_index: int | None = None,
    end_index: int | None = None,
) -> Dataset:
    """Windows of `sequence_length` steps (every `sampling_rate`-th step), one starting every
    `sequence_stride` steps, paired with `targets[start]` when targets are given.

    >>> import tapeflow as tp
    >>> ds = tp.utils.timeseries_dataset_from_array(np.arange(6), np.arange(6) * 10, 3, batch_size=2)
    >>> [(x.tolist(), y.tolist()) for x, y in ds]
    [([[0, 1, 2], [1, 2, 3]], [0, 10]), ([[2, 3, 4], [3, 4, 5]], [20, 30])]
    """
    data = np.asarray(data)
    length = len(data)
    if start_index:
        _check("start_index", start_index, 0, length)
    if end_index:
        if start_index and end_index <= start_index:
            raise ValueError(
                f"timeseries_dataset_from_array: end_index must be higher than start_index, "
                f"got start_index={start_index} and end_index={end_index}"
            )
        _check("end_index", end_index, 1, length)
    _check("sampling_rate", sampling_rate, 1, length)
    _check("sequence_stride", sequence_stride, 1, length)
    start = start_index or 0
    stop = length if end_index is None else end_index
    count = stop - start - (sequence_length - 1) * sampling_rate
    if targets is not None:
        targets = np.asarray(targets)
        count = min(count, len(targets))
    starts = np.arange(0, max(count, 0), sequence_stride, dtype=np.int64)
    if shuffle:
        if seed is None:
            seed = draw_seed()
        np.random.RandomState(seed).shuffle(starts)
    offsets = np.arange(0, sequence_length * sampling_rate, sampling_rate, dtype=np.int64)
    window = data[start:stop]

    if targets is None:
        dataset = Dataset.from_tensor_slices(starts).map(lambda p: window[p + offsets])
    else:
        target_window = targets[start:stop]
        dataset = Dataset.from_tensor_slices(starts).map(lambda p: (window[p + offsets], target_window[p]))
    if shuffle:
        dataset = dataset.shuffle(batch_size * 8 if batch_size is not None else 1024, seed=seed)
    return dataset if batch_size is None else dataset.batch(batch_size)
