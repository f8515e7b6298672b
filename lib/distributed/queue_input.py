"""A cluster queue as the input of the data-parallel strategies:
`model.fit(queue, steps_per_epoch=k, distribute=DataParallel(...) or AsyncParameterServer(...))`.

Producer tasks enqueue (x, y) elements; each replica dequeues the rows of its own shards
(of its own batches, asynchronously) straight from the queue's worker, so the rows never
pass through the client or the scheduler. The client knows only how many rows each step
takes; the labels stay on the replicas, so the model is compiled without metrics (the
loss is still reported). A row, once dequeued, is gone: the steps run again after a
worker dies (from the last checkpoint) train on rows dequeued anew.

>>> import tapeflow as tp
>>> with tp.distributed.Cluster(n_workers=2) as cluster:  # doctest: +SKIP
...     q = tp.queue.FIFOQueue(256, ["float32", "int64"], shapes=[(784,), ()], cluster=cluster)
...     producers = [cluster.client.submit(produce, q, part) for part in range(4)]
...     model.fit(q, batch_size=64, steps_per_epoch=100, distribute=tp.distributed.DataParallel(cluster))
"""

from __future__ import annotations

import numpy as np

from tapeflow.distributed.epoch_data import rows_reader
from tapeflow.distributed.queue import RemoteQueue, held_here
from tapeflow.queue.queues import QueueBase


def queue_sample(queue: QueueBase, batch_size: int, model, owner: str) -> tuple[np.ndarray, np.ndarray]:
    """Zero (x, y) arrays shaped as a batch of `batch_size` of `queue`'s elements, on which
    the gradient steps are traced; a ValueError naming `owner` when the queue cannot feed
    the replicas of `model`."""
    if not isinstance(queue, RemoteQueue):
        raise ValueError(
            f"fit: {owner} replicas run in other processes: the queue given as x must live on the cluster "
            f"(make it with cluster=), not in this process"
        )
    if len(queue.dtypes) != 2 or queue.names is not None:
        raise ValueError(f"fit: a queue given to {owner} must hold (x, y) elements: two components, without names")
    if queue.shapes is None or any(d is None for shape in queue.shapes for d in shape):
        raise ValueError(f"fit: a queue given to {owner} needs fully known shapes (make it with shapes=...)")
    if model.compiled_metrics:
        raise ValueError(
            f"fit: with a queue as x, {owner} leaves the labels on the replicas: compile the model without "
            "metrics (the loss is still reported)"
        )
    x, y = (np.zeros((batch_size, *shape), dtype.np) for shape, dtype in zip(queue.shapes, queue.dtypes, strict=True))
    return x, y


class QueueRows:
    """Rows dequeued from a queue of (x, y) elements: `take(rows)` dequeues as many rows as
    `rows` holds (their numbers only count them), waiting at most `timeout` seconds."""

    def __init__(self, queue: QueueBase, timeout: float):
        self.queue, self.timeout = held_here(queue), timeout

    def take(self, rows: np.ndarray):
        x, y = self.queue.dequeue_many(len(rows), timeout=self.timeout)
        return x.numpy(), y.numpy()


def replica_reader(data, timeout: float):
    """How a replica reads its rows from `data`: [queue] (`QueueRows`), or what `rows_reader` takes."""
    if isinstance(data, list) and len(data) == 1 and isinstance(data[0], QueueBase):
        return QueueRows(data[0], timeout)
    return rows_reader(data)
