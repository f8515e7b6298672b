"""One-hot class matrices and norm-scaled arrays, as Keras 3's `keras.utils` makes them."""

from __future__ import annotations

import numpy as np

from tapeflow.ops.array import one_hot
from tapeflow.ops.math import sqrt
from tapeflow.ops.reduce import sum as reduce_sum
from tapeflow.tensor import Tensor


def to_categorical(x, num_classes: int | None = None):
    """Class indices as one-hot rows (float64 NumPy for array input, as Keras gives;
    a tensor stays a tensor). A trailing axis of size 1 is dropped first.

    >>> to_categorical([0, 2], num_classes=3).tolist()
    [[1.0, 0.0, 0.0], [0.0, 0.0, 1.0]]
    >>> to_categorical([[1], [0]]).shape
    (2, 2)
    """
    if isinstance(x, Tensor):
        if x.ndim > 1 and x.shape[-1] == 1:
            x = x.reshape(x.shape[:-1])
        depth = int(np.max(x.numpy())) + 1 if not num_classes else int(num_classes)
        return one_hot(x, depth)
    x = np.array(x, dtype="int64")
    shape = x.shape[:-1] if x.ndim > 1 and x.shape[-1] == 1 else x.shape
    flat = x.reshape(-1)
    depth = int(np.max(flat)) + 1 if not num_classes else int(num_classes)
    if flat.size and (flat.min() < 0 or flat.max() >= depth):
        raise IndexError(
            f"to_categorical: class indices must lie in [0, {depth}), got values in [{flat.min()}, {flat.max()}]"
        )
    out = np.zeros((flat.shape[0], depth))
    out[np.arange(flat.shape[0]), flat] = 1
    return out.reshape(tuple(shape) + (depth,))


def normalize(x, axis: int = -1, order: int = 2):
    """`x` divided by its `order`-norm along `axis` (zero norms divide by 1; any axis,
    where Keras 3.15 divides along the last one when `axis=0`).

    >>> normalize(np.array([[3.0, 4.0], [0.0, 0.0]])).tolist()
    [[0.6, 0.8], [0.0, 0.0]]
    """
    if isinstance(x, np.ndarray) or not isinstance(x, Tensor):
        x = np.asarray(x)
        norm = np.atleast_1d(np.linalg.norm(x, order, axis))
        norm[norm == 0] = 1
        return x / np.expand_dims(norm, axis)
    if order != 2:
        raise ValueError(f"normalize: tensors support order=2 only, got order={order}")
    norm = sqrt(reduce_sum(x * x, axis=axis, keepdims=True))
    return x / (norm + (norm == 0).astype(x.dtype))
