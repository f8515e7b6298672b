"""Backends: one module per device family, each supplying kernels under op names.

A backend module holds, all optional:

- `<op>(*arrays, **attrs)`: the op's kernel, called exactly as the op's NumPy
  reference is; an op without one runs its reference;
- `bind_<op>(reference, **attrs)`: a callable of the input arrays only, with the
  attrs fixed once (how a graph's executor calls kernels); `reference` is the op's
  reference with the same attrs fixed, for inputs the compiled kernel does not take;
- `enter_numerics()` / `leave_numerics(state)`: the floating-point environment the
  kernels run in, set around each eager op and each graph run.

and, all required, how arrays cross its boundary:

- `FALLS_BACK_TO_REFERENCE`: whether an op without a kernel here runs its NumPy
  reference (the CPU) or is an `UnsupportedOpError` (an accelerator: nothing moves to
  the host behind the user's back);
- `HOLDS_NUMPY`: whether its arrays are NumPy arrays;
- `from_host(array, index)` / `to_host(array)`: an explicit copy in and out;
- `conform(array, npdtype)`: a kernel's result as this backend's array of the op's dtype;
- `dtype_of(array)`: the NumPy dtype of one of its arrays;
- `finish_run()`: called after each graph run (an accelerator launches its work here).

>>> from tapeflow.backends import backend
>>> backend("cpu").__name__
'tapeflow.backends.numpy_backend'
"""

from __future__ import annotations

import importlib

_MODULES = {
    "cpu": "tapeflow.backends.numpy_backend",
    "gpu": "tapeflow.backends.cupy_backend",
    "xla": "tapeflow.backends.xla_backend",
}
_LOADED: dict = {}


def backend(family: str):
    """The backend module serving a device family."""
    module = _LOADED.get(family)
    if module is None:
        try:
            name = _MODULES[family]
        except KeyError:
            raise ValueError(f"no backend for device family {family!r}") from None
        module = _LOADED[family] = importlib.import_module(name)
    return module


class UnsupportedOpError(NotImplementedError, ValueError):
    """An op that a device's backend cannot run (it is never moved to the CPU silently)."""
