"""Backends: one module per device family, each supplying kernels under op names.

A backend module holds, both optional:

- `<op>(*arrays, **attrs)`: the op's kernel, called exactly as the op's NumPy
  reference is; an op without one runs its reference (see FALLS_BACK_TO_REFERENCE);
- `bind_<op>(reference, **attrs)`: a callable of the input arrays only, with the
  attrs fixed once (how a graph's executor calls kernels); `reference` is the op's
  reference with the same attrs fixed, for inputs the compiled kernel does not take;

and, all required:

- `enter_numerics(index)` / `leave_numerics(state)`: the floating-point environment the
  kernels run in, and the device `index` of the family that host values copied in go to
  (`from_host(array)` without an index), set around each eager op and each graph run;

- `FALLS_BACK_TO_REFERENCE`: whether an op without a kernel here runs its NumPy
  reference (the CPU) or is an `UnsupportedOpError` (an accelerator: nothing moves to
  the host behind the user's back);
- `HOLDS_NUMPY`: whether its arrays are NumPy arrays;
- `RUNS_ON_HOST`: op names whose NumPy reference runs on the host and whose result is
  copied in (random draws, so one seed gives the same numbers on every device);
- `from_host(array, index)` / `to_host(array)`: an explicit copy in and out;
- `conform(array, npdtype, index)`: a kernel's result as this backend's array of the op's
  dtype (a host result copied to device `index`);
- `dtype_of(array)`: the NumPy dtype of one of its arrays;
- `stats(index)` / `memory_stats(index)`: its counters and its memory pool, as dicts.

`enter_numerics`/`leave_numerics` also bound the work an accelerator launches at once:
one eager op, or one whole graph run.

>>> from tapeflow.backends import backend
>>> backend("cpu").__name__
'tapeflow.backends.numpy_backend'
"""

from __future__ import annotations

import importlib

from tapeflow.devices import current_device, parse_device

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


def device_stats(device=None) -> dict:
    """Counters the device's backend keeps (default: the current device). On XLA:
    `compiles`, `compile_seconds`, `executions` and `cached_compiles` so far; on the CPU, none.

    >>> device_stats("cpu")
    {}
    """
    dev = current_device() if device is None else parse_device(device)
    return backend(dev.family).stats(dev.index)


def memory_stats(device=None) -> dict:
    """The device's memory in bytes: `in_use` by tensors and `cached` (held by the backend's
    pool for reuse, free to tensors); {} where the backend keeps no pool (the CPU).

    >>> memory_stats("cpu")
    {}
    """
    dev = current_device() if device is None else parse_device(device)
    return backend(dev.family).memory_stats(dev.index)
