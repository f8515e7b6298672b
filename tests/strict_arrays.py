"""`StrictArray`: a NumPy array behind the rules CuPy's arrays keep, so that the GPU backend
and the op references can be checked for them without a GPU: no implicit conversion to a NumPy array
(`np.asarray(a)` raises), and no host array mixed into an operation with it (indices of
`ufunc.at` excepted). NumPy functions reach it through `__array_function__` and ufuncs
through `__array_ufunc__`, as they reach CuPy's arrays.

>>> import numpy as np
>>> a = StrictArray(np.arange(3.0))
>>> unwrap(np.exp(a) + 1).round(2).tolist()
[2.0, 3.72, 8.39]
>>> np.asarray(a)
Traceback (most recent call last):
TypeError: implicit conversion of a device array to NumPy
"""

from __future__ import annotations

import types

import numpy as np
import numpy.lib.mixins as mixins


def unwrap(x):
    """NumPy arrays for StrictArrays, inside lists, tuples and dicts too."""
    if isinstance(x, StrictArray):
        return x.array
    if isinstance(x, list | tuple):
        return type(x)(unwrap(v) for v in x)
    if isinstance(x, dict):
        return {k: unwrap(v) for k, v in x.items()}
    return x


def wrap(x):
    """StrictArrays for NumPy arrays, inside lists and tuples too."""
    if isinstance(x, np.ndarray):
        return StrictArray(x)
    if isinstance(x, list | tuple):
        values = [wrap(v) for v in x]
        return type(x)(*values) if hasattr(x, "_fields") else type(x)(values)  # named results (slogdet, qr...)
    return x


def _holds_host_array(values) -> bool:
    for v in values:
        if isinstance(v, np.ndarray) and v.ndim > 0:
            return True
        if isinstance(v, list | tuple) and _holds_host_array(v):
            return True
    return False


class StrictArray(mixins.NDArrayOperatorsMixin):
    __slots__ = ("array",)

    def __init__(self, array: np.ndarray):
        self.array = array

    def __array__(self, dtype=None, copy=None):
        raise TypeError("implicit conversion of a device array to NumPy")

    def __array_ufunc__(self, ufunc, method, *inputs, **kwargs):
        checked = inputs[:1] + inputs[2:] if method == "at" else inputs
        if _holds_host_array(checked):
            raise TypeError(f"{ufunc.__name__}: a host array mixed with device arrays")
        if "out" in kwargs:
            kwargs["out"] = unwrap(kwargs["out"])
        return wrap(getattr(ufunc, method)(*unwrap(inputs), **kwargs))

    def __array_function__(self, func, types, args, kwargs):
        return wrap(func(*unwrap(args), **unwrap(kwargs)))

    def __getattr__(self, name):
        value = getattr(self.array, name)
        if callable(value):
            return lambda *args, **kwargs: wrap(value(*unwrap(args), **unwrap(kwargs)))
        return wrap(value)

    def __getitem__(self, key):
        return wrap(self.array[unwrap(key)])

    def __setitem__(self, key, value):
        if isinstance(value, np.ndarray) and value.ndim > 0:
            raise TypeError("setitem: a host array written into a device array")
        self.array[unwrap(key)] = unwrap(value)

    def __len__(self) -> int:
        return len(self.array)

    def __iter__(self):
        return (wrap(v) for v in self.array)

    def __bool__(self) -> bool:
        return bool(self.array)

    def __float__(self) -> float:
        return float(self.array)

    def __int__(self) -> int:
        return int(self.array)

    def __index__(self) -> int:
        return int(self.array)

    def __repr__(self) -> str:
        return f"StrictArray({self.array!r})"


class StrictArrayModule(types.ModuleType):
    """NumPy's namespace handing out StrictArrays: the array module a GPU backend written
    against `xp` sees as CuPy, with CuPy's rules kept."""

    ndarray = StrictArray

    def __init__(self):
        super().__init__("strict_array_module")

    def asarray(self, a, dtype=None):
        return StrictArray(np.asarray(unwrap(a), dtype=dtype))

    def asnumpy(self, a):
        return np.array(unwrap(a))

    def __getattr__(self, name):
        value = getattr(np, name)
        if callable(value) and not isinstance(value, type | np.ufunc):  # ufuncs dispatch themselves
            return lambda *args, **kwargs: wrap(value(*unwrap(args), **unwrap(kwargs)))
        return value


def use_strict_arrays(backend, monkeypatch) -> None:
    """Make the GPU backend module (run without a GPU) hold StrictArrays on its device."""
    module = StrictArrayModule()
    monkeypatch.setattr(backend, "xp", module)
    monkeypatch.setattr(backend, "to_host", module.asnumpy)
    monkeypatch.setattr(backend, "dtype_of", lambda a: np.dtype(unwrap(a).dtype))


def stand_in_gpu(monkeypatch) -> str:
    """List "gpu:0" where this process has no GPU, served by the GPU backend holding
    StrictArrays; returns the device name (a real GPU is used as it is)."""
    from tapeflow import _compat, devices
    from tapeflow.backends import cupy_backend
    from tapeflow.devices import Device

    if not _compat.has_gpu:
        listed = devices.list_devices
        monkeypatch.setattr(devices, "list_devices", lambda: [*listed(), Device("gpu", 0)])
        use_strict_arrays(cupy_backend, monkeypatch)
    return "gpu:0"
