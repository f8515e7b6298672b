"""Backends: one module per device family, each supplying kernels under op names.

A backend module holds, all optional:

- `<op>(*arrays, **attrs)`: the op's kernel, called exactly as the op's NumPy
  reference is; an op without one runs its reference;
- `bind_<op>(reference, **attrs)`: a callable of the input arrays only, with the
  attrs fixed once (how a graph's executor calls kernels); `reference` is the op's
  reference with the same attrs fixed, for inputs the compiled kernel does not take;
- `enter_numerics()` / `leave_numerics(state)`: the floating-point environment the
  kernels run in, set around each eager op and each graph run.

>>> from tapeflow.backends import backend
>>> backend("cpu").__name__
'tapeflow.backends.numpy_backend'
"""

from __future__ import annotations

import importlib

_MODULES = {"cpu": "tapeflow.backends.numpy_backend"}
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
