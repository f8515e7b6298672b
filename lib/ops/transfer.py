"""Send and recv: the two ends of a value crossing from one device to another in a
partitioned graph (the TensorFlow white paper, section 3.2.2).

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


def send(x, key: str) -> tuple:
    """Put `x` in the active rendezvous under `key` (see the module docstring)."""
    return apply(_SEND, (as_tensor(x),), {"key": key})


def recv(key: str, shape, dtype):
    """The value sent under `key` to the active rendezvous, of `shape` (None for a dynamic
    dimension) and `dtype`, taken out of it."""
    return apply(_RECV, (), {"key": key, "shape": tuple(shape), "dtype": dtypes.as_dtype(dtype).name})
