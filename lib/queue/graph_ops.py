"""Queue operations as graph nodes: while a function is traced, a queue's methods record
`queue_enqueue`, `queue_dequeue_many`, ... nodes instead of running.

A node names its queue by name only (its `queue` attr); the graph's `queues` binds the
name to a queue: the live queue for a graph traced in this process, the queue given to
`tp.load_graph(path, queues=...)` for a loaded one. The ops are stateful and run for their
effect, so graph passes never prune, merge, fold or reorder them.

>>> import tapeflow as tp
>>> q = tp.queue.FIFOQueue(4, "float32", shapes=[(2,)], name="batches")
>>> g = tp.freeze(lambda: q.dequeue() * 2.0)
>>> q.enqueue([1.0, 2.0])
>>> g().numpy().tolist()
[2.0, 4.0]
"""

from __future__ import annotations

import numpy as np

from tapeflow import dtypes as _dtypes
from tapeflow.graph.ir import GraphError
from tapeflow.ops import registry
from tapeflow.tensor import TRACING, FreezeError, user_frame


def tracing() -> bool:
    """Whether a function is being traced on this thread (queue methods then record nodes)."""
    return TRACING.tracer is not None


def record(queue, op: str, inputs: tuple, attrs: dict):
    """Record queue op `op` on `queue` in the graph being traced; binds the queue's name in
    that graph to `queue`. Returns the op's traced outputs (a tuple, or one for queue_size)."""
    tracer = TRACING.tracer
    if getattr(tracer, "parent", None) is not None:
        raise FreezeError(
            f"{queue.name}: {op} inside a tp.cond branch or tp.while_loop body at {user_frame()}: "
            "use the queue outside control flow"
        )
    bound = tracer.graph.queues.setdefault(queue.name, queue)
    if bound is not queue:
        raise FreezeError(f"{queue.name}: another queue of this name is used by the same traced function")
    return registry.apply(registry.get_op(op), tuple(inputs), {"queue": queue.name, **attrs})


def _bound(queue, op: str):
    if isinstance(queue, str):
        raise GraphError(f"{op}: queue {queue!r} is bound to no queue in this run")
    return queue


# ---------------------------------------------------------------- shape rules
def _infer_nothing(*inputs, **attrs) -> list:
    return []


def _specs(op: str, dtypes, shapes, lead: tuple) -> list:
    if len(dtypes) != len(shapes) or not dtypes:
        raise ValueError(f"{op}: {len(dtypes)} dtypes and {len(shapes)} shapes; give one shape per dtype")
    return [((*lead, *shape), _dtypes.as_dtype(d)) for d, shape in zip(dtypes, shapes, strict=True)]


def _infer_element(*, queue, dtypes, shapes, timeout=None) -> list:
    return _specs("queue_dequeue", dtypes, shapes, ())


def _infer_many(*, queue, dtypes, shapes, n, timeout=None) -> list:
    return _specs("queue_dequeue_many", dtypes, shapes, (n,))


def _infer_up_to(*, queue, dtypes, shapes, n, timeout=None) -> list:
    return _specs("queue_dequeue_up_to", dtypes, shapes, (None,))


def _infer_size(*, queue) -> list:
    return [((), _dtypes.int32)]


# ---------------------------------------------------------------- the ops
@registry.defop("queue_enqueue", infer=_infer_nothing, num_outputs=0, stateful=True)
def queue_enqueue(*components, queue, timeout=None):
    """Add one element (one array per component) to the queue."""
    _bound(queue, "queue_enqueue")._enqueue_arrays(components, "enqueue", timeout, batched=False)
    return ()


@registry.defop("queue_enqueue_many", infer=_infer_nothing, num_outputs=0, stateful=True)
def queue_enqueue_many(*components, queue, timeout=None):
    """Add the elements of the components, split along axis 0."""
    _bound(queue, "queue_enqueue_many")._enqueue_arrays(components, "enqueue_many", timeout, batched=True)
    return ()


@registry.defop("queue_dequeue", infer=_infer_element, num_outputs=None, stateful=True)
def queue_dequeue(*, queue, dtypes, shapes, timeout=None):
    """Remove one element: one array per component."""
    return tuple(_bound(queue, "queue_dequeue")._dequeue_arrays("dequeue", 1, timeout))


@registry.defop("queue_dequeue_many", infer=_infer_many, num_outputs=None, stateful=True)
def queue_dequeue_many(*, queue, dtypes, shapes, n, timeout=None):
    """Remove `n` elements, stacked along a new axis 0."""
    return tuple(_bound(queue, "queue_dequeue_many")._dequeue_arrays("dequeue_many", n, timeout))


@registry.defop("queue_dequeue_up_to", infer=_infer_up_to, num_outputs=None, stateful=True)
def queue_dequeue_up_to(*, queue, dtypes, shapes, n, timeout=None):
    """Remove up to `n` elements (fewer only from a closed queue), stacked along axis 0."""
    return tuple(_bound(queue, "queue_dequeue_up_to")._dequeue_arrays("dequeue_up_to", n, timeout))


@registry.defop("queue_close", infer=_infer_nothing, num_outputs=0, stateful=True)
def queue_close(*, queue, cancel_pending_enqueues=False):
    """Close the queue."""
    _bound(queue, "queue_close")._close(bool(cancel_pending_enqueues))
    return ()


@registry.defop("queue_size", infer=_infer_size, stateful=True)
def queue_size(*, queue):
    """The number of elements in the queue, as an int32 scalar."""
    return np.asarray(_bound(queue, "queue_size")._size(), np.int32)
