"""`StrictArray`: a NumPy array behind the rules CuPy 14's arrays keep, so that the GPU backend
and the op references can be checked for them without a GPU.

- No implicit conversion to the host: no `__array__`, no array interface, no buffer, no
  `__index__`; data leaves only through `get()`, `xp.asnumpy`, `item()`, `tolist()` or
  `float`/`int`/`bool` of one element, and every such read is counted in `HOST_READS`
  (each is a synchronization with the device).
- A ufunc takes device arrays, Python scalars and NumPy scalars only (no host array, not even
  a 0-d one, no list). `ufunc.at` is the array module's (`xp.add.at`), for add, subtract,
  maximum and minimum only, with device arrays for the indices and values; NumPy's own
  `np.add.at` on a device array fails, as CuPy's arrays answer NotImplemented to it. As CuPy's,
  `maximum.at` and `minimum.at` on float64 round each slot they reach to float32.
- A NumPy function reaching a device array runs only where CuPy 14 has a function of that
  name, and never with a host array beside it; an array method or attribute exists only where
  CuPy's ndarray has one (`flags` has no `writeable`).
- Results are device arrays, reductions and single elements included (0-d arrays, never
  NumPy scalars), as CuPy returns them.
- The array module offers exactly CuPy 14's names (`backends/cupy_namespace.json`, written by
  `backends/make_cupy_namespace.py` from the `cupy` package).

>>> import numpy as np
>>> a = StrictArray(np.arange(3.0))
>>> unwrap(np.exp(a) + 1).round(2).tolist()
[2.0, 3.72, 8.39]
>>> np.asarray(a)
Traceback (most recent call last):
TypeError: implicit conversion of a device array to NumPy (use .get() or xp.asnumpy)
>>> a * np.asarray(2.0)
Traceback (most recent call last):
TypeError: multiply: unsupported operand type numpy.ndarray (a host array) for a device ufunc
"""

from __future__ import annotations

import collections
import json
import pathlib
import types

import numpy as np
import numpy.lib.mixins as mixins

NAMESPACE = json.loads((pathlib.Path(__file__).parent / "backends" / "cupy_namespace.json").read_text())
MODULE_NAMES = frozenset(NAMESPACE["module"])
SUBMODULE_NAMES = {path: frozenset(names) for path, names in NAMESPACE["submodules"].items()}
# Attributes of CuPy's ndarray that hand out host memory or CUDA objects are left out.
NDARRAY_NAMES = frozenset(NAMESPACE["ndarray"]) - {"data", "cstruct", "mdspan", "toDlpack", "dump", "dumps", "tofile"}
SPECIAL_UFUNCS = frozenset(NAMESPACE["special_ufuncs"])  # SciPy's special ufuncs reach cupyx.scipy.special
UFUNC_AT = frozenset({"add", "subtract", "maximum", "minimum"})
HOST_CONSTRUCTORS = frozenset({"array", "asarray", "asanyarray"})  # the explicit host-to-device copies
HOST_READS: collections.Counter = collections.Counter()  # device-to-host reads by kind


def unwrap(x):
    """NumPy arrays for StrictArrays, inside lists, tuples and dicts too."""
    if isinstance(x, StrictArray):
        return x.array
    if isinstance(x, list | tuple):
        values = [unwrap(v) for v in x]
        return type(x)(*values) if hasattr(x, "_fields") else type(x)(values)
    if isinstance(x, dict):
        return {k: unwrap(v) for k, v in x.items()}
    return x


def wrap(x):
    """StrictArrays for NumPy arrays and NumPy scalars, inside lists and tuples too."""
    if isinstance(x, np.ndarray):
        return StrictArray(x)
    if isinstance(x, np.generic):
        return StrictArray(np.asarray(x))
    if isinstance(x, list | tuple):
        values = [wrap(v) for v in x]
        return type(x)(*values) if hasattr(x, "_fields") else type(x)(values)  # named results (slogdet, qr...)
    return x


def _host_array_in(values) -> np.ndarray | None:
    for v in values:
        if isinstance(v, np.ndarray):
            return v
        if isinstance(v, list | tuple) and (found := _host_array_in(v)) is not None:
            return found
        if isinstance(v, dict) and (found := _host_array_in(v.values())) is not None:
            return found
    return None


def _refuse_host_arrays(where: str, values) -> None:
    found = _host_array_in(values)
    if found is not None:
        raise TypeError(f"{where}: a host array (shape {found.shape}) mixed with device arrays")


def _ufunc_operand_ok(v) -> bool:
    return isinstance(v, StrictArray | bool | int | float | complex | np.generic)


def _read(kind: str, array: np.ndarray):
    HOST_READS[kind] += 1
    return array


class Flags:
    """CuPy's array flags: contiguity and ownership, nothing about writing."""

    __slots__ = ("c_contiguous", "f_contiguous", "owndata")

    def __init__(self, array: np.ndarray):
        self.c_contiguous = bool(array.flags.c_contiguous)
        self.f_contiguous = bool(array.flags.f_contiguous)
        self.owndata = bool(array.flags.owndata)


class StrictArray(mixins.NDArrayOperatorsMixin):
    __slots__ = ("array",)
    __array_priority__ = 100

    def __init__(self, array: np.ndarray):
        self.array = array

    def __array__(self, dtype=None, copy=None):
        raise TypeError("implicit conversion of a device array to NumPy (use .get() or xp.asnumpy)")

    def __array_ufunc__(self, ufunc, method, *inputs, **kwargs):
        name = ufunc.__name__
        if name not in MODULE_NAMES and name not in SPECIAL_UFUNCS:
            raise TypeError(f"{name}: CuPy 14 and cupyx.scipy.special have no such ufunc")
        if method == "at":
            return NotImplemented  # NumPy's ufunc.at does not reach CuPy's arrays: xp.<ufunc>.at does
        checked = inputs
        for v in checked:
            if not _ufunc_operand_ok(v):
                what = "a host array" if isinstance(v, np.ndarray) else "not an array or scalar"
                kind = f"{type(v).__module__}.{type(v).__name__}"
                raise TypeError(f"{name}: unsupported operand type {kind} ({what}) for a device ufunc")
        given = kwargs.get("out")
        if given is not None:
            outs = given if isinstance(given, tuple) else (given,)
            if not all(isinstance(o, StrictArray) or o is None for o in outs):
                raise TypeError(f"{name}: out= must be device arrays")
            kwargs["out"] = unwrap(given)
        _refuse_host_arrays(name, [v for k, v in kwargs.items() if k != "out"])
        result = getattr(ufunc, method)(*unwrap(inputs), **kwargs)
        if given is not None:
            outs = given if isinstance(given, tuple) else (given,)
            return outs[0] if len(outs) == 1 else outs
        return wrap(result)

    def __array_function__(self, func, types, args, kwargs):
        path = func.__module__.removeprefix("numpy").lstrip(".")
        names = MODULE_NAMES if not path else SUBMODULE_NAMES.get(path, frozenset())
        if func.__name__ not in names:
            raise TypeError(f"numpy.{path + '.' if path else ''}{func.__name__}: CuPy 14 has no such function")
        if "device" in kwargs:  # NumPy 2's like= passes device=, which CuPy 14's creation functions do not take
            raise TypeError(f"{func.__name__}() got an unexpected keyword argument 'device'")
        if func.__name__ not in HOST_CONSTRUCTORS:  # np.asarray(host, like=device) copies explicitly
            _refuse_host_arrays(func.__name__, [*args, *kwargs.values()])
        return wrap(func(*unwrap(args), **unwrap(kwargs)))

    def __getattr__(self, name):
        if name not in NDARRAY_NAMES:
            raise AttributeError(f"CuPy's ndarray has no attribute {name!r}")
        if name == "flags":
            return Flags(self.array)
        if name == "get":
            return lambda stream=None, out=None, **_: _read("get", np.array(self.array))
        if name == "item":
            return lambda *args: _read("item", self.array).item(*args)
        if name == "tolist":
            return lambda: _read("tolist", self.array).tolist()
        if name == "tobytes":
            return lambda order="C": _read("tobytes", self.array).tobytes(order)
        if name == "set":
            return self._set
        if name == "device":
            return "stand-in gpu:0"
        value = getattr(self.array, name)
        if callable(value):

            def method(*args, **kwargs):
                _refuse_host_arrays(f"ndarray.{name}", [a for a in args if not isinstance(a, np.dtype | type)])
                return wrap(value(*unwrap(args), **unwrap(kwargs)))

            return method
        return wrap(value)

    def _set(self, host: np.ndarray, stream=None) -> None:
        if not isinstance(host, np.ndarray) or host.shape != self.array.shape:
            raise ValueError(f"set: a host array of shape {self.array.shape} is needed")
        self.array[...] = host

    def __getitem__(self, key):
        return wrap(self.array[unwrap(key)])

    def __setitem__(self, key, value):
        if isinstance(value, np.ndarray):
            raise TypeError(f"setitem: a host array (shape {value.shape}) written into a device array")
        if isinstance(value, list | tuple):
            raise TypeError("setitem: a list written into a device array")
        self.array[unwrap(key)] = unwrap(value)

    def __len__(self) -> int:
        return len(self.array)

    def __iter__(self):
        return (wrap(v) for v in self.array)

    def __bool__(self) -> bool:
        return bool(_read("bool", self.array))

    def __float__(self) -> float:
        return float(_read("float", self.array))

    def __int__(self) -> int:
        return int(_read("int", self.array))

    def __complex__(self) -> complex:
        return complex(_read("complex", self.array))

    def __copy__(self):
        return StrictArray(self.array.copy())

    def __deepcopy__(self, memo):
        return StrictArray(self.array.copy())

    def __repr__(self) -> str:
        return f"StrictArray({self.array!r})"

    __hash__ = None


class _StrictSubmodule(types.ModuleType):
    def __init__(self, path: str):
        super().__init__(f"strict_array_module.{path}")
        self._path = path
        self._numpy = np
        for part in path.split("."):
            self._numpy = getattr(self._numpy, part)

    def __getattr__(self, name):
        if name.startswith("_") or name not in SUBMODULE_NAMES[self._path]:
            raise AttributeError(f"CuPy 14 has no cupy.{self._path}.{name}")
        return _strict_function(f"{self._path}.{name}", getattr(self._numpy, name))


def _strict_function(name: str, value):
    if isinstance(value, type) or not callable(value):
        return value

    def function(*args, **kwargs):
        if name not in HOST_CONSTRUCTORS:
            _refuse_host_arrays(name, [*args, *kwargs.values()])
        return wrap(value(*unwrap(args), **unwrap(kwargs)))

    function.__name__ = name
    return function


class StrictArrayModule(types.ModuleType):
    """CuPy 14's namespace, served by NumPy and handing out StrictArrays: the array module a
    GPU backend written against `xp` sees as CuPy, with CuPy's rules kept."""

    ndarray = StrictArray

    def __init__(self):
        super().__init__("strict_array_module")
        self.linalg = _StrictSubmodule("linalg")
        self.fft = _StrictSubmodule("fft")
        self.random = _StrictSubmodule("random")
        self.lib = types.SimpleNamespace(stride_tricks=_StrictSubmodule("lib.stride_tricks"))

    def asnumpy(self, a, stream=None, order="C", out=None):
        if isinstance(a, StrictArray):
            return _read("asnumpy", np.array(a.array))
        return np.array(a)

    def ascontiguousarray(self, a, dtype=None):
        if not isinstance(a, StrictArray):
            raise TypeError(f"ascontiguousarray: a device array is needed, got {type(a).__name__}")
        return StrictArray(np.ascontiguousarray(a.array, dtype=dtype))

    def __getattr__(self, name):
        if name.startswith("_") or name not in MODULE_NAMES:
            raise AttributeError(f"CuPy 14 has no cupy.{name}")
        value = getattr(np, name)
        if isinstance(value, np.ufunc):
            return StrictUfunc(value)
        return _strict_function(name, value)


class StrictUfunc:
    """The array module's ufunc: called, NumPy's (which dispatches to StrictArray itself); its
    `at` is CuPy's, for add, subtract, maximum and minimum, on device arrays only."""

    def __init__(self, ufunc: np.ufunc):
        self.ufunc = ufunc

    def __call__(self, *args, **kwargs):
        return self.ufunc(*args, **kwargs)

    def __getattr__(self, name):
        return getattr(self.ufunc, name)

    def at(self, a, indices, b=None):
        name = self.ufunc.__name__
        if name not in UFUNC_AT:
            raise NotImplementedError(f"{name}.at: CuPy 14 implements ufunc.at for {sorted(UFUNC_AT)} only")
        if not isinstance(a, StrictArray):
            raise TypeError(f"{name}.at: the target must be a device array, got {type(a).__name__}")
        parts = indices if isinstance(indices, tuple) else (indices,)
        if any(isinstance(p, np.ndarray | list) for p in parts) or isinstance(b, np.ndarray | list):
            raise TypeError(f"{name}.at: indices and values must be device arrays or scalars, not host arrays")
        self.ufunc.at(a.array, unwrap(indices), unwrap(b))
        if name in ("maximum", "minimum") and a.array.dtype == np.float64:
            # CuPy 14's atomicMax and atomicMin on doubles compare through fmaxf and fminf: each
            # slot they reach is rounded to float32
            reached = np.zeros(a.array.shape, bool)
            reached[unwrap(indices)] = True
            with np.errstate(over="ignore"):
                a.array[reached] = a.array[reached].astype(np.float32).astype(np.float64)


def use_strict_arrays(backend, monkeypatch) -> None:
    """Make the GPU backend module (run without a GPU) hold StrictArrays on its device."""
    module = StrictArrayModule()
    monkeypatch.setattr(backend, "xp", module)
    monkeypatch.setattr(backend, "to_host", module.asnumpy)
    monkeypatch.setattr(backend, "dtype_of", lambda a: np.dtype(a.dtype))


def dispatch_on_host(backend, monkeypatch) -> None:
    """Run the GPU backend's GPU branches on NumPy arrays, in this process whether or not it has
    a GPU, for tests that replace the compiled kernels with recorders."""
    monkeypatch.setattr(backend, "ON_GPU", True)
    monkeypatch.setattr(backend, "xp", np)
    monkeypatch.setattr(backend, "to_host", np.asarray)


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
