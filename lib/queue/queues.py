"""Queues of tensors shared between threads, with TensorFlow's semantics: a bounded buffer
of elements (tuples of tensors of fixed dtypes) that producers enqueue and consumers
dequeue, one at a time or in batches, blocking while the queue is full or empty.

- `enqueue` blocks while the queue holds `capacity` elements; on a closed queue it raises
  `CancelledError`.
- `dequeue`, `dequeue_many(n)` block until there are enough elements; on a closed queue
  that holds too few they raise `OutOfRangeError` (and leave the elements where they are).
  `dequeue_up_to(n)` on a closed queue returns what is left, if anything.
- Every blocking call takes `timeout` (seconds) and raises `DeadlineExceededError` past it.

>>> import tapeflow as tp
>>> q = tp.queue.FIFOQueue(4, ["float32", "int64"], shapes=[(2,), ()])
>>> q.enqueue([[1.0, 2.0], 7])
>>> q.enqueue_many([[[3.0, 4.0], [5.0, 6.0]], [8, 9]])
>>> x, label = q.dequeue()
>>> x.numpy().tolist(), int(label)
([1.0, 2.0], 7)
>>> [t.shape for t in q.dequeue_many(2)]
[(2, 2), (2,)]
>>> q.close(); q.dequeue()
Traceback (most recent call last):
...
tapeflow.queue.errors.OutOfRangeError: fifo_queue...: dequeue: the queue is closed and holds 0 elements, 1 needed
"""

from __future__ import annotations

import threading
import time
from collections import deque

import numpy as np

from tapeflow import dtypes as _dtypes
from tapeflow.ops.creation import tensor as as_tensor
from tapeflow.queue import graph_ops
from tapeflow.queue.errors import CancelledError, DeadlineExceededError, OutOfRangeError
from tapeflow.tensor import Tensor

_TAKEN: set[str] = set()
_NAMES_LOCK = threading.Lock()


# how a queue is made on a cluster's worker: set by tapeflow.distributed.queue (a later
# import stage, which tapeflow's own import brings in), so this module never imports it
_REMOTE: dict = {"create": None}


def serve_remote_queues(create) -> None:
    """Make `create(queue_class, args, kwargs, cluster, worker)` what a queue built with
    `cluster=` returns (tapeflow.distributed.queue calls this when imported)."""
    _REMOTE["create"] = create


def _unique_name(base: str) -> str:
    with _NAMES_LOCK:
        name, n = base, 0
        while name in _TAKEN:
            n += 1
            name = f"{base}_{n}"
        _TAKEN.add(name)
        return name


def _count(queue_name: str, op: str, label: str, value, low: int) -> int:
    if isinstance(value, bool) or not isinstance(value, int | np.integer) or value < low:
        raise ValueError(f"{queue_name}: {op}: {label} must be an int >= {low}, got {value!r}")
    return int(value)


class QueueBase:
    """What the three queues share; see the module's docstring for the semantics."""

    _default_name = "queue"
    _shapes_may_be_partial = False

    def __new__(cls, *args, cluster=None, worker: str | None = None, **kwargs):
        """With `cluster` (a `tp.distributed.Cluster`), the queue is made on one of its
        workers (`worker`, an address, or the first) and a proxy to it is returned."""
        if cluster is None:
            if worker is not None:
                raise ValueError(f"{cls.__name__}: worker={worker!r} needs cluster= (a queue on a Dask worker)")
            return super().__new__(cls)
        if _REMOTE["create"] is None:
            raise RuntimeError(f"{cls.__name__}: cluster= needs tapeflow.distributed, which was not imported")
        return _REMOTE["create"](cls, args, kwargs, cluster, worker)

    def __init__(
        self,
        capacity: int,
        dtypes,
        shapes=None,
        names=None,
        name: str | None = None,
        cluster=None,
        worker: str | None = None,
    ):
        self.name = _unique_name(name or self._default_name)
        self.capacity = _count(self.name, "queue", "capacity", capacity, 1)
        single = not isinstance(dtypes, list | tuple)
        dtype_list = [dtypes] if single else list(dtypes)
        if not dtype_list:
            raise ValueError(f"{self.name}: dtypes must name at least one component")
        self.dtypes = [_dtypes.as_dtype(d) for d in dtype_list]
        self.shapes = None if shapes is None else self._check_shapes(shapes, single)
        if names is not None:
            names = [names] if isinstance(names, str) else list(names)
            if len(names) != len(self.dtypes) or len(set(names)) != len(names):
                raise ValueError(f"{self.name}: names {names} must be {len(self.dtypes)} distinct names, one per dtype")
            if not all(isinstance(n, str) for n in names):
                raise TypeError(f"{self.name}: names must be strings, got {names}")
        self.names = names
        self._single = single and names is None
        self._single_dtype = single
        self._items: deque[tuple[np.ndarray, ...]] = deque()
        self._cond = threading.Condition()
        self._closed = False
        self._cancelled = False

    def _config(self) -> dict:
        """The keyword arguments that make a queue like this one (of the same name)."""
        dtypes = self.dtypes[0].name if self._single_dtype else [d.name for d in self.dtypes]
        return {
            "capacity": self.capacity,
            "dtypes": dtypes,
            "shapes": self.shapes,
            "names": self.names,
            "name": self.name,
        }

    def _check_shapes(self, shapes, single: bool) -> list[tuple]:
        one_listed = isinstance(shapes, list | tuple) and len(shapes) == 1 and isinstance(shapes[0], list | tuple)
        shape_list = [shapes] if single and not one_listed else list(shapes)
        if len(shape_list) != len(self.dtypes):
            raise ValueError(f"{self.name}: {len(shape_list)} shapes given for {len(self.dtypes)} dtypes")
        out = []
        for shape in shape_list:
            dims = tuple(shape)
            for d in dims:
                if d is None and self._shapes_may_be_partial:
                    continue
                if isinstance(d, bool) or not isinstance(d, int | np.integer) or d < 0:
                    raise ValueError(
                        f"{self.name}: shape {dims} must hold sizes >= 0 (None only in a PaddingFIFOQueue)"
                    )
            out.append(tuple(None if d is None else int(d) for d in dims))
        return out

    # ------------------------------------------------------------------ components
    def _component_values(self, vals, op: str) -> list:
        """`vals` (a value, a list or a dict by name) as a list of one value per component."""
        if self.names is not None:
            if not isinstance(vals, dict) or set(vals) != set(self.names):
                got = sorted(vals) if isinstance(vals, dict) else type(vals).__name__
                raise ValueError(f"{self.name}: {op}: expected a dict with keys {self.names}, got {got}")
            vals = [vals[n] for n in self.names]
        elif len(self.dtypes) == 1 and not (
            isinstance(vals, list | tuple) and len(vals) == 1 and self._is_value(vals[0])
        ):
            vals = [vals]
        elif not isinstance(vals, list | tuple) or len(vals) != len(self.dtypes):
            raise ValueError(f"{self.name}: {op}: expected {len(self.dtypes)} components, got {_describe(vals)}")
        return list(vals)

    def _components(self, values, op: str, batched: bool) -> tuple[np.ndarray, ...]:
        """One array per component (copied), checked against the dtypes and shapes."""
        arrays = tuple(self._array(v, i, op, batched) for i, v in enumerate(values))
        if batched:
            counts = {a.shape[0] for a in arrays}
            if len(counts) != 1:
                raise ValueError(
                    f"{self.name}: {op}: the components hold different numbers of elements {sorted(counts)}"
                )
        return arrays

    @staticmethod
    def _is_value(v) -> bool:
        return isinstance(v, Tensor | np.ndarray)

    def _array(self, value, i: int, op: str, batched: bool) -> np.ndarray:
        dtype = self.dtypes[i]
        if isinstance(value, Tensor | np.ndarray | np.generic):
            array = np.array(value.numpy() if isinstance(value, Tensor) else value, copy=True)
            if array.dtype != dtype.np:
                raise TypeError(
                    f"{self.name}: {op}: component {i} must be {dtype.name}, got {_dtypes.as_dtype(array.dtype).name}"
                )
        else:
            try:
                array = np.asarray(value, dtype=dtype.np)
            except (TypeError, ValueError) as err:
                raise ValueError(f"{self.name}: {op}: component {i} is not a {dtype.name} array: {err}") from None
        if batched and array.ndim == 0:
            raise ValueError(f"{self.name}: {op}: component {i} needs a leading batch axis, got a scalar")
        if self.shapes is not None:
            shape = array.shape[1:] if batched else array.shape
            want = self.shapes[i]
            if len(shape) != len(want) or any(w is not None and w != s for w, s in zip(want, shape, strict=True)):
                what = "each element of component" if batched else "component"
                raise ValueError(f"{self.name}: {op}: {what} {i} must have shape {want}, got {tuple(shape)}")
        return array

    def _traced_components(self, values, op: str, batched: bool) -> tuple:
        """One tensor per component of an element enqueued while tracing, checked against
        the dtypes and the known sizes of the shapes."""
        out = []
        for i, value in enumerate(values):
            dtype = self.dtypes[i]
            keeps_dtype = isinstance(value, Tensor | np.ndarray | np.generic)
            t = as_tensor(value if keeps_dtype else np.asarray(value, dtype.np))
            if t.dtype is not dtype:
                raise TypeError(f"{self.name}: {op}: component {i} must be {dtype.name}, got {t.dtype.name}")
            shape = tuple(t.shape)
            if batched and not shape:
                raise ValueError(f"{self.name}: {op}: component {i} needs a leading batch axis, got a scalar")
            shape = shape[1:] if batched else shape
            want = None if self.shapes is None else self.shapes[i]
            if want is not None and (
                len(shape) != len(want)
                or any(w is not None and s is not None and w != s for w, s in zip(want, shape, strict=True))
            ):
                what = "each element of component" if batched else "component"
                raise ValueError(f"{self.name}: {op}: {what} {i} must have shape {want}, got {shape}")
            out.append(t)
        return tuple(out)

    def _graph_attrs(self, op: str, timeout) -> dict:
        """The attrs of a traced dequeue node: the element's dtypes and shapes, and the timeout."""
        if self.shapes is None:
            raise ValueError(
                f"{self.name}: {op} inside a traced function needs the queue's shapes "
                "(create the queue with shapes=...)"
            )
        _check_timeout(self.name, op, timeout)
        return {"dtypes": tuple(d.name for d in self.dtypes), "shapes": tuple(self.shapes), "timeout": timeout}

    def _result(self, arrays: tuple):
        tensors = [a if isinstance(a, Tensor) else as_tensor(a) for a in arrays]
        if self.names is not None:
            return dict(zip(self.names, tensors, strict=True))
        return tensors[0] if self._single else tensors

    # ------------------------------------------------------------------ waiting
    def _wait(self, ready, op: str, timeout) -> None:
        """Wait on the condition (held) until `ready()`; DeadlineExceededError past `timeout`."""
        _check_timeout(self.name, op, timeout)
        deadline = None if timeout is None else time.monotonic() + timeout
        while not ready():
            left = None if deadline is None else deadline - time.monotonic()
            if left is not None and left <= 0:
                raise DeadlineExceededError(
                    f"{self.name}: {op}: timed out after {timeout} s (the queue holds {len(self._items)} "
                    f"of {self.capacity} elements)"
                )
            self._cond.wait(left)

    def _reserve(self) -> int:
        """How many elements a dequeue must leave behind while the queue is open."""
        return 0

    def _take(self) -> tuple[np.ndarray, ...]:
        return self._items.popleft()

    # ------------------------------------------------------------------ what graph nodes call
    def _enqueue_arrays(self, values, op: str, timeout, batched: bool) -> None:
        """Enqueue one element (or, `batched`, the elements along axis 0) given one value
        per component: what `enqueue`, `enqueue_many` and their graph nodes run."""
        arrays = self._components(values, op, batched)
        if batched:
            self._put([tuple(a[k] for a in arrays) for k in range(arrays[0].shape[0])], op, timeout)
        else:
            self._put([arrays], op, timeout)

    def _dequeue_arrays(self, op: str, n: int, timeout) -> tuple[np.ndarray, ...]:
        """One array per component: the element (`op` "dequeue") or the batch ("dequeue_many",
        "dequeue_up_to") taken; what the dequeues and their graph nodes run."""
        if op == "dequeue":
            return self._get(1, op, timeout, up_to=False)[0]
        n = _count(self.name, op, "n", n, 1 if op == "dequeue_up_to" else 0)
        return self._stack(self._get(n, op, timeout, up_to=op == "dequeue_up_to"), op)

    # ------------------------------------------------------------------ the API
    def enqueue(self, vals, timeout: float | None = None) -> None:
        """Add one element; blocks while the queue is full. While a function is traced, a
        `queue_enqueue` node that enqueues each time the graph runs."""
        self._enqueue("enqueue", vals, timeout, batched=False)

    def enqueue_many(self, vals, timeout: float | None = None) -> None:
        """Add the elements of `vals` split along axis 0 of every component, in order."""
        self._enqueue("enqueue_many", vals, timeout, batched=True)

    def _enqueue(self, op: str, vals, timeout, batched: bool) -> None:
        values = self._component_values(vals, op)
        if graph_ops.tracing():
            _check_timeout(self.name, op, timeout)
            graph_ops.record(self, f"queue_{op}", self._traced_components(values, op, batched), {"timeout": timeout})
            return
        self._enqueue_arrays(values, op, timeout, batched)

    def _put(self, elements: list, op: str, timeout) -> None:
        with self._cond:
            if self._closed:
                raise CancelledError(f"{self.name}: {op}: the queue is closed")
            for element in elements:
                self._wait(lambda: self._cancelled or len(self._items) < self.capacity, op, timeout)
                if self._cancelled:
                    raise CancelledError(f"{self.name}: {op}: the queue was closed with its pending enqueues cancelled")
                self._items.append(element)
                self._cond.notify_all()

    def dequeue(self, timeout: float | None = None):
        """Remove and return one element: a tensor, a list of tensors, or a dict by name.
        While a function is traced, a `queue_dequeue` node (the queue needs shapes)."""
        if graph_ops.tracing():
            return self._result(graph_ops.record(self, "queue_dequeue", (), self._graph_attrs("dequeue", timeout)))
        return self._result(self._dequeue_arrays("dequeue", 1, timeout))

    def dequeue_many(self, n: int, timeout: float | None = None):
        """Remove `n` elements and return them stacked along a new axis 0."""
        return self._dequeue_batch("dequeue_many", n, timeout, low=0)

    def dequeue_up_to(self, n: int, timeout: float | None = None):
        """As `dequeue_many(n)`, but a closed queue gives what it still holds (at least one)."""
        return self._dequeue_batch("dequeue_up_to", n, timeout, low=1)

    def _dequeue_batch(self, op: str, n, timeout, low: int):
        n = _count(self.name, op, "n", n, low)
        if graph_ops.tracing():
            attrs = {**self._graph_attrs(op, timeout), "n": n}
            return self._result(graph_ops.record(self, f"queue_{op}", (), attrs))
        return self._result(self._dequeue_arrays(op, n, timeout))

    def _get(self, n: int, op: str, timeout, up_to: bool) -> list:
        with self._cond:
            self._wait(lambda: self._closed or len(self._items) >= n + self._reserve(), op, timeout)
            held = len(self._items)
            if held < n and (not up_to or held == 0):
                raise OutOfRangeError(f"{self.name}: {op}: the queue is closed and holds {held} elements, {n} needed")
            taken = [self._take() for _ in range(min(n, held))]
            self._cond.notify_all()
            return taken

    def _stack(self, elements: list, op: str) -> tuple[np.ndarray, ...]:
        out = []
        for i, dtype in enumerate(self.dtypes):
            parts = [e[i] for e in elements]
            if not parts:
                if self.shapes is None or None in self.shapes[i]:
                    raise ValueError(f"{self.name}: {op}: 0 elements of component {i} need a fully known shape")
                out.append(np.zeros((0, *self.shapes[i]), dtype.np))
                continue
            shapes = {p.shape for p in parts}
            if len(shapes) > 1:
                raise ValueError(
                    f"{self.name}: {op}: component {i} has elements of shapes {sorted(shapes)}; "
                    "give the queue fixed shapes (or use a PaddingFIFOQueue)"
                )
            out.append(np.stack(parts))
        return tuple(out)

    def close(self, cancel_pending_enqueues: bool = False) -> None:
        """No more enqueues; waiting dequeues finish with what is there. With
        `cancel_pending_enqueues`, enqueues waiting for room fail with CancelledError."""
        if graph_ops.tracing():
            graph_ops.record(self, "queue_close", (), {"cancel_pending_enqueues": bool(cancel_pending_enqueues)})
            return
        self._close(bool(cancel_pending_enqueues))

    def _close(self, cancel_pending_enqueues: bool) -> None:
        """Close the queue now: what `close` and its graph node run."""
        with self._cond:
            self._closed = True
            self._cancelled = self._cancelled or bool(cancel_pending_enqueues)
            self._cond.notify_all()

    def size(self) -> int:
        """The number of elements in the queue now (while tracing, an int32 tensor computed
        each time the graph runs)."""
        if graph_ops.tracing():
            return graph_ops.record(self, "queue_size", (), {})
        return self._size()

    def _size(self) -> int:
        """The number of elements now: what `size` and its graph node run."""
        with self._cond:
            return len(self._items)

    def is_closed(self) -> bool:
        """Whether `close` was called."""
        return self._closed

    def __repr__(self) -> str:
        dtypes = [d.name for d in self.dtypes]
        return f"<{type(self).__name__} {self.name!r} capacity={self.capacity} dtypes={dtypes} size={self.size()}>"


class FIFOQueue(QueueBase):
    """A queue that dequeues elements in the order they were enqueued.

    Args:
        capacity: the most elements the queue holds; enqueues wait for room beyond it.
        dtypes: the dtype of each component of an element (one dtype: single-tensor elements).
        shapes: the shape of each component (optional; `dequeue_many` then works for 0 too).
        names: a name per component: elements are enqueued and dequeued as dicts.
        name: the queue's name (made unique), which graphs and errors use.
        cluster: a `tp.distributed.Cluster`: the queue lives on one of its workers, and the
            object returned is a proxy with the same methods, usable from the client or any
            worker (see `tapeflow.distributed.queue`).
        worker: the address of the worker to hold it (default: the cluster's first).

    >>> import tapeflow as tp
    >>> q = tp.queue.FIFOQueue(3, "int32")
    >>> q.enqueue_many([1, 2, 3]); q.size()
    3
    >>> q.close(); q.dequeue_up_to(5).numpy().tolist()
    [1, 2, 3]
    """

    _default_name = "fifo_queue"


class PaddingFIFOQueue(QueueBase):
    """A FIFO queue whose shapes may leave sizes unknown (None): `dequeue_many` and
    `dequeue_up_to` pad each component with zeros to the largest element in the batch.

    >>> import tapeflow as tp
    >>> q = tp.queue.PaddingFIFOQueue(4, "float32", shapes=[(None,)])
    >>> q.enqueue([1.0]); q.enqueue([2.0, 3.0])
    >>> q.dequeue_many(2).numpy().tolist()
    [[1.0, 0.0], [2.0, 3.0]]
    """

    _default_name = "padding_fifo_queue"
    _shapes_may_be_partial = True

    def __init__(self, capacity: int, dtypes, shapes, names=None, name: str | None = None, cluster=None, worker=None):
        if shapes is None:
            raise ValueError("PaddingFIFOQueue: shapes are required (None marks a size to pad)")
        super().__init__(capacity, dtypes, shapes, names, name)

    def _stack(self, elements: list, op: str) -> tuple[np.ndarray, ...]:
        out = []
        for i, dtype in enumerate(self.dtypes):
            parts = [e[i] for e in elements]
            known = self.shapes[i]
            size = tuple(max((p.shape[d] for p in parts), default=0) if k is None else k for d, k in enumerate(known))
            batch = np.zeros((len(parts), *size), dtype.np)
            for k, p in enumerate(parts):
                batch[(k, *(slice(0, n) for n in p.shape))] = p
            out.append(batch)
        return tuple(out)


class RandomShuffleQueue(QueueBase):
    """A queue that dequeues its elements in random order. While it is open, a dequeue
    leaves at least `min_after_dequeue` elements behind (so that the order mixes well);
    once closed, it drains.

    Args:
        capacity, dtypes, shapes, names, name: as for `FIFOQueue`.
        min_after_dequeue: elements a dequeue leaves in an open queue; less than `capacity`.
        seed: the seed of the order (None: a fresh one).

    >>> import tapeflow as tp
    >>> q = tp.queue.RandomShuffleQueue(10, 0, "int64", seed=1)
    >>> q.enqueue_many(list(range(10)))
    >>> sorted(q.dequeue_many(10).numpy().tolist())
    [0, 1, 2, 3, 4, 5, 6, 7, 8, 9]
    """

    _default_name = "random_shuffle_queue"

    def __init__(
        self,
        capacity: int,
        min_after_dequeue: int,
        dtypes,
        shapes=None,
        names=None,
        seed: int | None = None,
        name: str | None = None,
        cluster=None,
        worker: str | None = None,
    ):
        super().__init__(capacity, dtypes, shapes, names, name)
        self.min_after_dequeue = _count(self.name, "queue", "min_after_dequeue", min_after_dequeue, 0)
        if self.min_after_dequeue >= self.capacity:
            raise ValueError(
                f"{self.name}: min_after_dequeue ({self.min_after_dequeue}) must be less than capacity "
                f"({self.capacity}), or every dequeue would wait forever"
            )
        self.seed = seed
        self._rng = np.random.default_rng(seed)

    def _config(self) -> dict:
        return {**super()._config(), "min_after_dequeue": self.min_after_dequeue, "seed": self.seed}

    def _reserve(self) -> int:
        return 0 if self._closed else self.min_after_dequeue

    def _take(self) -> tuple[np.ndarray, ...]:
        k = int(self._rng.integers(len(self._items)))
        self._items.rotate(-k)
        element = self._items.popleft()
        self._items.rotate(k)
        return element


def _check_timeout(queue_name: str, op: str, timeout) -> None:
    if timeout is not None and (isinstance(timeout, bool) or not isinstance(timeout, int | float) or timeout < 0):
        raise ValueError(f"{queue_name}: {op}: timeout must be a number of seconds >= 0 or None, got {timeout!r}")


def _describe(vals) -> str:
    if isinstance(vals, list | tuple):
        return f"{len(vals)}"
    return type(vals).__name__
