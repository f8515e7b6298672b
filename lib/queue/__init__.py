"""Queues of tensors (`FIFOQueue`, `RandomShuffleQueue`, `PaddingFIFOQueue`) that decouple
producers from consumers, with TensorFlow's semantics, and the errors their operations raise.
Inside a traced function their methods record graph nodes (see `tapeflow.queue.graph_ops`);
with `cluster=` a queue lives on a Dask worker (see `tapeflow.distributed.queue`).

>>> import tapeflow as tp
>>> q = tp.queue.FIFOQueue(2, "float32")
>>> q.enqueue(1.0); float(q.dequeue())
1.0
"""

from tapeflow.queue.errors import CancelledError, DeadlineExceededError, OutOfRangeError, QueueError, UnavailableError
from tapeflow.queue.queues import FIFOQueue, PaddingFIFOQueue, QueueBase, RandomShuffleQueue

__all__ = [
    "CancelledError",
    "DeadlineExceededError",
    "FIFOQueue",
    "OutOfRangeError",
    "PaddingFIFOQueue",
    "QueueBase",
    "QueueError",
    "RandomShuffleQueue",
    "UnavailableError",
]
