"""Creating tensors: from data, filled, ranges, identity, and *_like ops.

>>> import tapeflow as tp
>>> tp.zeros((2, 3)).shape, tp.arange(3).dtype
((2, 3), tapeflow.int64)
"""

from __future__ import annotations

import math

import numpy as np

from tapeflow import dtypes
from tapeflow.devices import device as device_scope
from tapeflow.ops import shapes
from tapeflow.ops.core import cast, full_like, ones_like, zeros_like
from tapeflow.ops.dynamic_shape import zeros_of
from tapeflow.ops.registry import as_tensor, wrap_host
from tapeflow.tensor import Tensor


def tensor(value, dtype=None, device=None) -> Tensor:
    """A tensor holding a copy of `value` (Python floats become float32), on `device`
    (default: the current device). A tensor given as `value` is moved only to a `device`
    named explicitly.

    >>> import tapeflow as tp
    >>> tp.tensor([[1.0, 2.0]], device="cpu").dtype
    tapeflow.float32
    """
    if isinstance(value, Tensor):
        t = value if dtype is None else cast(value, dtype)
        return t if device is None else t.to(device)
    if device is not None:
        with device_scope(device):
            return tensor(value, dtype)
    t = as_tensor(value, dtype=dtype, name="tensor")
    if isinstance(value, np.ndarray) and t._value is value:
        t = Tensor._wrap(value.copy(), t.device)
    return t


constant = tensor


def _shape_of(name: str, shape) -> tuple:
    return shapes.as_dims(name, shape)


def _filled(shape, value, dtype, name, device=None) -> Tensor:
    d = dtypes.as_dtype(dtype) if dtype is not None else dtypes.result_type(value)
    if shapes.has_dynamic(shape):
        zeros = zeros_of(name, shape, d)
        return zeros if value == 0 else full_like(zeros, value, d)
    return wrap_host(np.full(_shape_of(name, shape), value, dtype=d.np), device)


def zeros(shape, dtype="float32", device=None) -> Tensor:
    """A tensor of zeros.

    >>> import tapeflow as tp
    >>> tp.zeros((2,)).numpy().tolist()
    [0.0, 0.0]
    """
    return _filled(shape, 0, "float32" if dtype is None else dtype, "zeros", device)


def ones(shape, dtype="float32", device=None) -> Tensor:
    """A tensor of ones.

    >>> import tapeflow as tp
    >>> tp.ones((2,), dtype="int32").numpy().tolist()
    [1, 1]
    """
    return _filled(shape, 1, "float32" if dtype is None else dtype, "ones", device)


def full(shape, fill_value, dtype=None, device=None) -> Tensor:
    """A tensor filled with one value (dtype from the value when not given).

    >>> import tapeflow as tp
    >>> tp.full((2,), 7).numpy().tolist()
    [7, 7]
    """
    return _filled(shape, fill_value, dtype, "full", device)


def arange(start, stop=None, step=1, dtype=None, device=None) -> Tensor:
    """Evenly spaced values in [start, stop) (int64 for ints, float32 for floats).

    >>> import tapeflow as tp
    >>> tp.arange(1, 7, 2).numpy().tolist()
    [1, 3, 5]
    """
    if stop is None:
        start, stop = 0, start
    if step == 0:
        raise ValueError("arange: step cannot be zero")
    count = math.ceil((stop - start) / step) if all(map(math.isfinite, (start, stop, step))) else math.inf
    if count > shapes.MAX_DIM:
        raise ValueError(f"arange: [{start}, {stop}) in steps of {step} has {count} values, more than {shapes.MAX_DIM}")
    d = dtypes.as_dtype(dtype) if dtype is not None else dtypes.result_type(start, stop, step)
    return wrap_host(np.arange(start, stop, step, dtype=d.np), device)


def linspace(start, stop, num: int, dtype="float32", device=None) -> Tensor:
    """`num` evenly spaced values from start to stop, both included.

    >>> import tapeflow as tp
    >>> tp.linspace(0, 1, 3).numpy().tolist()
    [0.0, 0.5, 1.0]
    """
    arr = np.linspace(start, stop, shapes.as_int("linspace", "num", num), dtype=np.float64).astype(
        dtypes.as_dtype(dtype).np
    )
    return wrap_host(arr, device)


def eye(n: int, m: int | None = None, dtype="float32", device=None) -> Tensor:
    """An identity matrix (n x m).

    >>> import tapeflow as tp
    >>> tp.eye(2).numpy().tolist()
    [[1.0, 0.0], [0.0, 1.0]]
    """
    return wrap_host(
        np.eye(
            shapes.as_int("eye", "n", n),
            None if m is None else shapes.as_int("eye", "m", m),
            dtype=dtypes.as_dtype(dtype).np,
        ),
        device,
    )


__all__ = [
    "tensor",
    "constant",
    "zeros",
    "ones",
    "full",
    "arange",
    "linspace",
    "eye",
    "zeros_like",
    "ones_like",
    "full_like",
]
