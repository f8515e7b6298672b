"""float16 and bfloat16 inputs of reductions and normalizations run in float32 and come back
in their own dtype: 11 or 8 bits of mantissa lose sums, counts and squares on the way."""

from __future__ import annotations

import functools
import inspect

from tapeflow.ops.core import HALF_FLOATS, cast
from tapeflow.tensor import Tensor


def _half_dtype(value):
    dtype = getattr(value, "dtype", None)
    return dtype if dtype is not None and getattr(dtype, "name", None) in HALF_FLOATS else None


def _widen(value):
    return cast(value, "float32") if _half_dtype(value) is not None else value


def _narrow(value, dtype):
    if isinstance(value, (tuple, list)):
        return type(value)(_narrow(v, dtype) for v in value)
    if isinstance(value, Tensor) and value.dtype.name == "float32":
        return cast(value, dtype)
    return value


def in_float32(fn):
    """Wrap `fn` so that when its first argument (after `self`, for a method) is half
    precision, it and every other half-precision argument are computed in float32; float32
    results come back in that dtype. An explicit `dtype=` argument turns the widening off.

    >>> import tapeflow as tp
    >>> total = in_float32(lambda x: tp.cumsum(x, axis=0))
    >>> y = total(tp.ones((4096,), dtype="float16"))
    >>> y.dtype.name, float(y[-1])
    ('float16', 4096.0)
    """
    signature = inspect.signature(fn)
    takes_dtype = "dtype" in signature.parameters
    first = 1 if list(signature.parameters)[:1] == ["self"] else 0  # a method: the argument after self

    @functools.wraps(fn)
    def wrapper(*args, **kwargs):
        if len(args) > first and isinstance(args[first], Tensor) and args[first].dtype.name not in HALF_FLOATS:
            return fn(*args, **kwargs)  # the common case, without binding the arguments
        try:
            bound = signature.bind_partial(*args, **kwargs).arguments
        except TypeError:
            return fn(*args, **kwargs)  # raises the function's own error
        dtype = _half_dtype(next(iter(list(bound.values())[first:]), None))
        if dtype is None or (takes_dtype and bound.get("dtype") is not None):
            return fn(*args, **kwargs)
        return _narrow(fn(*map(_widen, args), **{k: _widen(v) for k, v in kwargs.items()}), dtype)

    return wrapper
