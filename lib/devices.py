"""Devices and the `tp.device(...)` context that picks where new tensors live.

Tensors move between devices only when asked (`tensor.to(device)`); an op on tensors
from two devices is a `DeviceMismatchError`.

>>> import tapeflow as tp
>>> with tp.device("cpu"):
...     tp.ones((2,)).device
Device('cpu:0')
"""

from __future__ import annotations

import threading
from contextlib import contextmanager

from tapeflow import _compat


class Device:
    """A place where tensors live and kernels run: a family and an index."""

    __slots__ = ("family", "index")

    def __init__(self, family: str, index: int = 0):
        self.family = family
        self.index = index

    def __repr__(self) -> str:
        return f"Device('{self}')"

    def __str__(self) -> str:
        return f"{self.family}:{self.index}"

    def __eq__(self, other) -> bool:
        return isinstance(other, Device) and (self.family, self.index) == (other.family, other.index)

    def __hash__(self) -> int:
        return hash((self.family, self.index))


CPU = Device("cpu", 0)


class DeviceMismatchError(ValueError):
    """An op's inputs live on different devices (tensors are never copied implicitly)."""


def check_same_device(name: str, tensors) -> Device:
    """The one device all `tensors` live on, or a DeviceMismatchError naming both.

    >>> import tapeflow as tp
    >>> check_same_device("add", [tp.ones(()), tp.zeros(())])
    Device('cpu:0')
    """
    first = tensors[0]._device
    for t in tensors:
        dev = t._device
        if dev is not first and dev != first:
            raise DeviceMismatchError(
                f"{name}: inputs live on different devices, {first} and {dev}; "
                f"move one explicitly with tensor.to({str(first)!r}) or tensor.to({str(dev)!r})"
            )
    return first


_FAMILIES = ("cpu", "gpu", "xla")


def parse_device(spec) -> Device:
    """Parse "cpu", "gpu:1" or a Device, checking that it exists here."""
    if isinstance(spec, Device):
        dev = spec
    elif isinstance(spec, str):
        family, _, index = spec.lower().partition(":")
        if family not in _FAMILIES or (index and not index.isdigit()):
            raise ValueError(f"device: unknown device {spec!r}; expected 'cpu', 'gpu:N' or 'xla:N'")
        dev = Device(family, int(index or 0))
    else:
        raise TypeError(f"device: expected a string or Device, got {type(spec).__name__}")
    if dev not in list_devices():
        have = ", ".join(str(d) for d in list_devices())
        raise ValueError(f"device: {dev} is not available here (available: {have})")
    return dev


def list_devices() -> list[Device]:
    """Every device this process can use.

    >>> list_devices()[0]
    Device('cpu:0')
    """
    devices = [CPU]
    if _compat.has_gpu:
        devices += [Device("gpu", i) for i in range(_compat._gpu_count())]
    if _compat.has_xla:
        devices.append(Device("xla", 0))
    return devices


_state = threading.local()


def current_device() -> Device:
    """The device new tensors are placed on in this thread."""
    stack = getattr(_state, "stack", None)
    return stack[-1] if stack else CPU


@contextmanager
def device(spec):
    """Place tensors created inside the block on `spec` ("cpu", "gpu:0", ...)."""
    dev = parse_device(spec)
    stack = getattr(_state, "stack", None)
    if stack is None:
        stack = _state.stack = []
    stack.append(dev)
    try:
        yield dev
    finally:
        stack.pop()
