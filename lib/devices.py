"""Devices and the `tp.device(...)` context that picks where new tensors live.

Tensors move between devices only when asked (`tensor.to(device)`); an op on tensors
from two devices is a `DeviceMismatchError`.

A local name ("cpu", "gpu:1") places eager tensors in this process. A worker name
("/worker:1", "/worker:1/gpu:0") places graph nodes instead: ops traced inside the
block (by `tp.freeze`, `tp.function` or a model's freezing) record that device on their
nodes, and partitioning (tapeflow.graph.partition) cuts the graph where it changes.
A worker name never changes where eager tensors live here.

>>> import tapeflow as tp
>>> with tp.device("cpu"):
...     tp.ones((2,)).device
Device('cpu:0')
>>> with tp.device("/worker:1") as where:
...     str(where), tp.devices.current_placement()
('/worker:1/cpu:0', '/worker:1/cpu:0')
"""

from __future__ import annotations

import re
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

    @classmethod
    def named(cls, name: str) -> Device:
        """The device a local name ("cpu", "xla:1") names, whether or not it exists here.

        >>> Device.named("gpu:1")
        Device('gpu:1')
        """
        family, _, index = local_device_name(name).partition(":")
        return cls(family, int(index))


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


def local_device_name(spec: str) -> str:
    """The canonical name of a device of this process ("gpu" -> "gpu:0"), not checked
    against what exists here; a ValueError for a name that is not one.

    >>> local_device_name("XLA")
    'xla:0'
    """
    family, _, index = spec.strip().lower().partition(":")
    if family not in _FAMILIES or (index and not index.isdigit()):
        raise ValueError(f"device: unknown device {spec!r}; expected 'cpu', 'gpu:N' or 'xla:N'")
    return f"{family}:{int(index or 0)}"


def is_local_name(name) -> bool:
    """Whether `name` names a device of this process ("xla:0") rather than a worker's
    ("/worker:1/cpu:0")."""
    return isinstance(name, str) and not name.startswith("/")


def parse_device(spec) -> Device:
    """Parse "cpu", "gpu:1" or a Device, checking that it exists here."""
    if isinstance(spec, Device):
        dev = spec
    elif isinstance(spec, str):
        dev = Device.named(spec)
    else:
        raise TypeError(f"device: expected a string or Device, got {type(spec).__name__}")
    if dev == CPU:  # always here; asks no accelerator runtime
        return dev
    listed = list_devices()
    if dev not in listed:
        have = ", ".join(str(d) for d in listed)
        why = gpu_unavailable_reason() if dev.family == "gpu" else None
        because = f": {why}" if why else ""
        raise ValueError(f"device: {dev} is not available here{because} (available: {have})")
    return dev


class WorkerDevice:
    """A device on a worker of a cluster, "/worker:<w>/<family>:<index>": where graph nodes
    placed with `tp.device("/worker:1")` run. It is not checked against this process's
    devices, since it names another machine's.

    >>> WorkerDevice.parse("/worker:2/gpu:1")
    WorkerDevice('/worker:2/gpu:1')
    >>> WorkerDevice.parse("/worker:0").family
    'cpu'
    """

    __slots__ = ("worker", "family", "index")

    def __init__(self, worker: int, family: str = "cpu", index: int = 0):
        self.worker, self.family, self.index = worker, family, index

    @classmethod
    def parse(cls, spec: str) -> WorkerDevice:
        """Parse "/worker:W" or "/worker:W/<cpu|gpu|xla>:N" (a ValueError names a bad one)."""
        match = _WORKER_NAME.fullmatch(spec.strip().lower()) if isinstance(spec, str) else None
        if match is None:
            raise ValueError(
                f"device: unknown worker device {spec!r}; expected '/worker:W' or '/worker:W/<cpu|gpu|xla>:N'"
            )
        worker, family, index = match.groups()
        return cls(int(worker), family or "cpu", int(index or 0))

    def __str__(self) -> str:
        return f"/worker:{self.worker}/{self.family}:{self.index}"

    def __repr__(self) -> str:
        return f"WorkerDevice('{self}')"

    def __eq__(self, other) -> bool:
        return isinstance(other, WorkerDevice) and str(self) == str(other)

    def __hash__(self) -> int:
        return hash(str(self))


_WORKER_NAME = re.compile(r"/worker:(\d+)(?:/(cpu|gpu|xla):(\d+))?")


def canonical_placement(spec) -> str:
    """The canonical name of a worker device ("/worker:1" -> "/worker:1/cpu:0")."""
    return str(spec if isinstance(spec, WorkerDevice) else WorkerDevice.parse(spec))


def list_devices() -> list[Device]:
    """Every device this process can use. A GPU is listed only once CuPy has compiled and
    run a kernel on it (checked on the first call); `gpu_unavailable_reason()` says why none is.

    >>> list_devices()[0]
    Device('cpu:0')
    """
    devices = [CPU]
    devices += [Device("gpu", i) for i in range(_compat.gpu_check()[0])]
    if _compat.has_xla:
        devices += [Device("xla", i) for i in range(_compat.xla_device_count())]
    return devices


def gpu_unavailable_reason() -> str | None:
    """Why this process lists no GPU (what is missing, and how to install it), or None when it lists one.

    >>> reason = gpu_unavailable_reason()
    >>> reason is None or reason.startswith("CuPy")
    True
    """
    return _compat.gpu_check()[1]


_state = threading.local()


def current_device() -> Device:
    """The device new tensors are placed on in this thread."""
    stack = getattr(_state, "stack", None)
    return stack[-1] if stack else CPU


def current_placement(resolve=None) -> str | None:
    """The worker device that graph nodes traced now are placed on, or None.

    Inside `colocate_with(tensors)` (an op's gradient is computed there) that is
    `resolve(tensors)`, the device of the node that made them as the active tracer knows
    it, unless that is None; otherwise the innermost `tp.device("/worker:...")` block's.
    """
    for entry in reversed(getattr(_state, "placements", None) or ()):
        if isinstance(entry, str):
            return entry
        found = resolve(entry) if resolve is not None else None
        if found is not None:
            return found
    return None


@contextmanager
def colocate_with(tensors: tuple):
    """Place graph nodes traced in the block beside `tensors` (see `current_placement`)."""
    stack = getattr(_state, "placements", None)
    if stack is None:
        stack = _state.placements = []
    stack.append(tuple(tensors))
    try:
        yield
    finally:
        stack.pop()


@contextmanager
def device(spec):
    """Place tensors created inside the block on `spec` ("cpu", "gpu:0", ...), or graph
    nodes traced inside it on a worker device ("/worker:1", "/worker:1/gpu:0")."""
    if isinstance(spec, WorkerDevice) or isinstance(spec, str) and spec.lstrip().startswith("/"):
        name = canonical_placement(spec)
        with _pushed("placements", name):
            yield WorkerDevice.parse(name)
        return
    dev = parse_device(spec)
    with _pushed("stack", dev):
        yield dev


@contextmanager
def _pushed(attr: str, value):
    """`value` on this thread's stack `attr` for the duration of the block."""
    stack = getattr(_state, attr, None)
    if stack is None:
        stack = []
        setattr(_state, attr, stack)
    stack.append(value)
    try:
        yield
    finally:
        stack.pop()
