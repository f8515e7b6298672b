"""A queue as the data of `fit`, `evaluate` or `predict`: batches taken with
`dequeue_up_to(batch_size)` until the queue is closed and drained.

>>> import tapeflow as tp
>>> q = tp.queue.FIFOQueue(8, ["float32", "float32"], shapes=[(2,), ()])
>>> q.enqueue_many([[[1.0, 2.0]] * 5, [0.0] * 5]); q.close()
>>> [x.shape for x, y in queue_batches(q, 2, where="fit")]
[(2, 2), (2, 2), (1, 2)]
"""

from __future__ import annotations

from collections.abc import Iterator

from tapeflow.queue.errors import OutOfRangeError


def queue_batches(queue, batch_size: int, where: str, y=None, sample_weight=None) -> Iterator[tuple]:
    """The (x, y[, sample_weight]) batches of a queue whose elements are such tuples (or x
    alone, for predict), up to `batch_size` elements each; the queue's end is the data's."""
    if y is not None or sample_weight is not None:
        raise ValueError(f"{where}: with a queue as x, y and sample_weight must be None (its elements hold them)")
    return _batches(queue, batch_size)


def _batches(queue, batch_size: int) -> Iterator[tuple]:
    while True:
        try:
            batch = queue.dequeue_up_to(batch_size)
        except OutOfRangeError:
            return
        yield tuple(batch) if isinstance(batch, list) else batch
