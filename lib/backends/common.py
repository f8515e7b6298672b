"""Value checks shared by op references and backend kernels: labels and indices in range.

>>> import numpy as np
>>> check_index_range("gather", np.array([0, -3]), 3, 0)
"""

from __future__ import annotations

import numpy as np


def check_labels(name: str, labels: np.ndarray, num_classes: int) -> None:
    """Class labels must lie in [0, num_classes)."""
    if labels.size and (labels.min() < 0 or labels.max() >= num_classes):
        bad = labels[(labels < 0) | (labels >= num_classes)].flat[0]
        raise ValueError(f"{name}: label {bad} is out of range [0, {num_classes})")


class IndexOutOfRange(IndexError, ValueError):
    """An index outside a tensor's bounds (both an IndexError and a ValueError)."""


def check_index_range(name: str, idx: np.ndarray, size: int, axis: int) -> None:
    """Indices must lie in [-size, size)."""
    if idx.size and (idx.min() < -size or idx.max() >= size):
        bad = idx[(idx < -size) | (idx >= size)].flat[0]
        raise IndexOutOfRange(f"{name}: index {bad} is out of range for axis {axis} of size {size}")
