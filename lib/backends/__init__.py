"""Backends: one module per device family, each supplying kernels under op names.

A backend module holds, both optional:

- `<op>(*arrays, **attrs)`: the op's kernel, called exactly as the op's NumPy
  reference is; an op without one runs its reference (see FALLS_BACK_TO_REFERENCE);
- `bind_<op>(reference, **attrs)`: a callable of the input arrays only, with the
  attrs fixed once (a graph's executor binds each node once); where it exists, eager ops
  and constant folding run it too (`OpDef.bound_kernel` finds both). `reference` is the
  op's reference with the same attrs fixed, for inputs the compiled kernel does not take;

and, all required:

- `enter_numerics(index)` / `leave_numerics(state)`: the floating-point environment the
  kernels run in, and the device `index` of the family that host values copied in go to
  (`from_host(array)` without an index); called only through `numerics`, around each eager
  op, each folded node and each graph run;

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

`numerics` also bounds the work an accelerator launches at once: one eager op, or one
whole graph run.

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


class numerics:
    """Context in which kernels of `devices` run: each device's backend sets its numerics
    (floating-point environment, current device) on entry and restores them on exit, in
    reverse order. Eager ops, constant folding and graph runs all run kernels inside it, so
    one kernel gives the same bits in each.

    >>> import numpy as np
    >>> from tapeflow.devices import CPU
    >>> tiny = np.array([1e-30], np.float32)
    >>> with numerics(CPU):  # subnormal float32 results are flushed to zero
    ...     (tiny * np.float32(1e-10)).tolist()
    [0.0]
    """

    __slots__ = ("_devices", "_entered")

    def __init__(self, *devices):
        self._devices = devices

    def __enter__(self) -> numerics:
        entered = self._entered = []
        try:
            for device in self._devices:
                entered.append(numerics.enter(device))
        except BaseException:
            self.__exit__(None, None, None)
            raise
        return self

    def __exit__(self, exc_type, exc, traceback) -> None:
        entered = self._entered
        while entered:
            numerics.leave(entered.pop())

    @staticmethod
    def enter(device) -> tuple:
        """Set the numerics of one device; returns (its backend module, what `leave`
        restores). The same as entering `numerics(device)`, for the per-op hot path of eager
        ops, where a `with` block's object would cost as much as a small kernel."""
        kernels = _LOADED.get(device.family) or backend(device.family)
        return kernels, kernels.enter_numerics(device.index)

    @staticmethod
    def leave(entered: tuple) -> None:
        """Restore what `enter` returned."""
        kernels, state = entered
        kernels.leave_numerics(state)


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
