"""Moving values between devices: `copy_to_device` in one process, and `send` and `recv`,
the two ends of a value crossing between workers in a partitioned graph (the TensorFlow
white paper, section 3.2.2).

`copy_to_device(x, "xla:0")` (what `tensor.to("xla:0")` records) is the only way a value
changes device, eagerly and in a frozen graph, where it is a node of its own; its gradient
copies the gradient back.

`tapeflow.graph.partition` replaces every edge between two devices by a `send` node on
the device that makes the value and a `recv` node on the device that reads it, both
named by one rendezvous key. Whoever runs a partition hands the run a rendezvous, a dict
from keys to arrays (`with rendezvous(table): graph.execute(...)`): a `send` puts its
value under its key and a `recv` takes the value of its key out. Carrying arrays from
the table of one device to the table of another (in one process, or worker to worker)
is the runtime's job. Neither op has a gradient: a graph is partitioned once its
gradient nodes are in it, and the values they need cross by send/recv pairs of their own.

>>> import numpy as np
>>> table = {}
>>> with rendezvous(table):
...     _ = send(np.ones(2, np.float32), key="a;b;x")
...     y = recv(key="a;b;x", shape=(2,), dtype="float32")
>>> y.numpy().tolist(), table
([1.0, 1.0], {})
"""

from __future__ import annotations

import threading
from contextlib import contextmanager

import numpy as np

from tapeflow import dtypes
from tapeflow.backends import backend
from tapeflow.devices import Device, local_device_name, parse_device
from tapeflow.ops import shapes
from tapeflow.ops.registry import apply, as_tensor, defop

_STATE = threading.local()


@contextmanager
def rendezvous(table: dict):
    """Run the block's sends and recvs (in this thread) against `table` (key -> array)."""
    saved = getattr(_STATE, "table", None)
    _STATE.table = table
    try:
        yield table
    finally:
        _STATE.table = saved


def _table(op: str, key: str) -> dict:
    table = getattr(_STATE, "table", None)
    if table is None:
        raise RuntimeError(f"{op} '{key}': no rendezvous is active; run the graph inside `rendezvous(table)`")
    return table


def _key(op: str, key) -> str:
    if not isinstance(key, str) or not key:
        raise TypeError(f"{op}: the rendezvous key must be a non-empty string, got {key!r}")
    return key


def _send_infer(x, key):
    _key("send", key)
    return []


@defop("send", infer=_send_infer, num_outputs=0, stateful=True)
def _SEND(x, key):
    table = _table("send", key)
    if key in table:
        raise RuntimeError(f"send '{key}': the rendezvous already holds a value under this key (sent twice)")
    table[key] = x
    return ()


def _recv_infer(key, shape, dtype):
    _key("recv", key)
    return [(shapes.as_dims("recv", shape, unknown=True), dtypes.as_dtype(dtype))]


@defop("recv", infer=_recv_infer, stateful=True)
def _RECV(key, shape, dtype):
    table = _table("recv", key)
    if key not in table:
        raise RuntimeError(f"recv '{key}': nothing was sent under this key to this run's rendezvous")
    value = table.pop(key)
    expected = dtypes.as_dtype(dtype).np
    fits = len(value.shape) == len(shape) and all(d is None or d == n for d, n in zip(shape, value.shape, strict=True))
    if value.dtype != expected or not fits:
        raise ValueError(
            f"recv '{key}': expected {np.dtype(expected).name}{list(shape)}, got {value.dtype}{list(value.shape)}"
        )
    return value


def _copy_infer(x, source, device):
    for attr, name in (("source", source), ("device", device)):
        if not isinstance(name, str) or local_device_name(name) != name:
            raise ValueError(f"copy_to_device: {attr} must be a device name such as 'cpu:0' or 'xla:0', got {name!r}")
    return [(x.shape, x.dtype)]


def _copy_vjp(grads, inputs, outputs, source, device):
    (g,) = grads
    return [None if g is None else copy_to_device(g, source)]


@defop("copy_to_device", infer=_copy_infer, vjp=_copy_vjp, transfer=True)
def _COPY_TO_DEVICE(x, source, device):
    """The array of device `source` as an array of `device` (both "family:index")."""
    src, dst = Device.named(source), Device.named(device)
    host = backend(src.family).to_host(x)
    return backend(dst.family).from_host(host, dst.index)


def copy_to_device(x, device):
    """`x` copied to `device` (a name such as "xla:0", or a Device): eagerly a new tensor
    there, in a frozen graph a transfer node. Its gradient is copied back.

    >>> import tapeflow as tp
    >>> copy_to_device(tp.ones((2,)), "cpu").device
    Device('cpu:0')
    """
    x = as_tensor(x)
    return apply(_COPY_TO_DEVICE, (x,), {"source": str(x.device), "device": str(parse_device(device))})


def send(x, key: str) -> tuple:
    """Put `x` in the active rendezvous under `key` (see the module docstring)."""
    return apply(_SEND, (as_tensor(x),), {"key": key})


def recv(key: str, shape, dtype):
    """The value sent under `key` to the active rendezvous, of `shape` (None for a dynamic
    dimension) and `dtype`, taken out of it."""
    return apply(_RECV, (), {"key": key, "shape": tuple(shape), "dtype": dtypes.as_dtype(dtype).name})
