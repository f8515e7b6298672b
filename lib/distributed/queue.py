"""Queues shared by the processes of a Dask cluster: `tp.queue.FIFOQueue(..., cluster=cluster)`
(and `RandomShuffleQueue`, `PaddingFIFOQueue`) makes the queue on one worker, inside a
`QueueActor`, and returns a `RemoteQueue`: a proxy with the queue's methods, which the
client and any worker (a proxy passed to a task) call alike.

Elements travel as NumPy arrays in actor calls, straight between the caller's process and
the queue's worker, never through the scheduler. The proxy checks dtypes and shapes before
sending, so a bad element fails in the caller. A queue's errors (`OutOfRangeError`,
`DeadlineExceededError`, ...) reach the caller as they are; a caller waiting on a queue
whose worker died gets `UnavailableError` naming the worker, within a second or two of the
death (or of its own `timeout`), never a hang. Inside a traced function a proxy records the
same queue nodes as a local queue, so a graph on any process can feed from it.

The queue lives as long as the proxy made by the client (the one that holds the actor's
future); copies of it on workers do not keep it alive.

>>> import tapeflow as tp
>>> with tp.distributed.Cluster(n_workers=2) as cluster:  # doctest: +SKIP
...     q = tp.queue.FIFOQueue(8, "float32", shapes=[(2,)], cluster=cluster)
...     q.enqueue([1.0, 2.0])
...     q.dequeue().numpy().tolist()
[1.0, 2.0]
"""

from __future__ import annotations

import asyncio
import threading
import time

from tapeflow import _compat
from tapeflow.distributed.runtime.liveness import is_communication_error
from tapeflow.distributed.runtime.tasks import start_actor
from tapeflow.queue.errors import DeadlineExceededError, UnavailableError
from tapeflow.queue.queues import QueueBase, serve_remote_queues

_POLL = 0.5  # seconds between looks at the queue's worker while a call waits
_MARGIN = 5.0  # seconds past a call's own timeout before the caller gives up on the answer


class QueueActor:
    """A Dask actor holding one eager queue. Each call runs on a thread of its own (a daemon,
    so that a call still waiting never keeps the worker from exiting), so a dequeue waiting
    for elements never holds up the enqueue that brings them."""

    def __init__(self, queue_class, config: dict):
        self.queue = queue_class(**config)

    async def _run(self, fn, *args):
        loop = asyncio.get_running_loop()
        answer = loop.create_future()

        def settle(result, error) -> None:
            if not answer.done():
                answer.set_exception(error) if error is not None else answer.set_result(result)

        def work() -> None:
            try:
                result = fn(*args)
            except BaseException as err:  # noqa: BLE001 - handed to the caller
                loop.call_soon_threadsafe(settle, None, err)
            else:
                loop.call_soon_threadsafe(settle, result, None)

        threading.Thread(target=work, name=f"queue-{self.queue.name}", daemon=True).start()
        return await answer

    async def name(self) -> str:
        return self.queue.name

    async def enqueue(self, arrays, op: str, timeout, batched: bool) -> None:
        await self._run(self.queue._enqueue_arrays, arrays, op, timeout, batched)

    async def dequeue(self, op: str, n: int, timeout):
        return await self._run(self.queue._dequeue_arrays, op, n, timeout)

    async def close(self, cancel_pending_enqueues: bool) -> None:
        self.queue._close(cancel_pending_enqueues)

    async def size(self) -> int:
        return self.queue._size()

    async def is_closed(self) -> bool:
        return self.queue.is_closed()


def create(queue_class, args: tuple, kwargs: dict, cluster, worker: str | None) -> RemoteQueue:
    """A queue of `queue_class(*args, **kwargs)` on `worker` of `cluster` (default: its first
    worker), and the proxy to it. The arguments are checked here first."""
    local = queue_class(*args, **kwargs)  # checks the arguments, and takes the name in this process
    workers = cluster.workers
    if worker is None:
        if not workers:
            raise RuntimeError(f"{local.name}: the cluster has no workers to hold the queue")
        worker = workers[0]
    elif worker not in workers:
        raise ValueError(f"{local.name}: worker {worker!r} is not in the cluster (workers: {workers})")
    future = start_actor(cluster.client, QueueActor, queue_class, local._config(), worker=worker)
    actor = future.result(timeout=cluster.timeout)
    proxy = RemoteQueue(local, actor, worker, future)
    proxy.name = proxy._call("name", timeout=cluster.timeout, op="queue")
    return proxy


class RemoteQueue(QueueBase):
    """A proxy to a queue held by a `QueueActor` on `worker`; it has the queue's methods
    and attributes (`name`, `capacity`, `dtypes`, `shapes`, `names`)."""

    def __new__(cls, *args, **kwargs):
        return object.__new__(cls)

    def __init__(self, local: QueueBase, actor, worker: str, future=None):
        self.kind = type(local).__name__
        self.name, self.capacity, self.dtypes = local.name, local.capacity, local.dtypes
        self.shapes, self.names, self._single = local.shapes, local.names, local._single
        self.worker = worker
        self._actor = actor
        self._future = future  # held by the client's proxy only: it keeps the actor alive

    def __getstate__(self) -> dict:
        return {k: v for k, v in self.__dict__.items() if k != "_future"} | {"_future": None}

    def _call(self, method: str, *args, timeout, op: str):
        """The answer of the actor's `method(*args)`; a queue call that may wait `timeout`
        seconds (None: as long as it takes) is given that long and a margin, and the
        queue's worker is looked at every `_POLL` seconds meanwhile."""
        try:
            future = getattr(self._actor, method)(*args)
        except RuntimeError as err:  # Dask's "Worker holding Actor was lost"
            raise self._unavailable(op, err) from None
        limit = None if timeout is None else time.monotonic() + timeout + _MARGIN
        while True:
            try:
                return future.result(timeout=_POLL)
            except Exception as err:
                if not future.done():  # the poll ran out: the call is still waiting
                    pass
                elif is_communication_error(err):
                    raise self._unavailable(op, err) from None
                else:
                    raise
            if not self._worker_alive():
                raise self._unavailable(op, "the scheduler no longer lists it")
            if limit is not None and time.monotonic() > limit:
                raise DeadlineExceededError(
                    f"{self.name}: {op}: the worker {self.worker} holding the queue did not answer "
                    f"within {timeout + _MARGIN:g} s"
                )

    def _worker_alive(self) -> bool:
        try:
            client = _compat.require_distributed().get_client()
            return self.worker in client.nthreads()
        except Exception:  # noqa: BLE001 - no scheduler to ask: the wait goes on until its own timeout
            return True

    def _unavailable(self, op: str, why) -> UnavailableError:
        return UnavailableError(f"{self.name}: {op}: the worker {self.worker} holding the queue is gone ({why})")

    # ------------------------------------------------------------------ what the methods run
    def _enqueue_arrays(self, values, op: str, timeout, batched: bool) -> None:
        arrays = self._components(values, op, batched)
        self._call("enqueue", arrays, op, timeout, batched, timeout=timeout, op=op)

    def _dequeue_arrays(self, op: str, n: int, timeout):
        return tuple(self._call("dequeue", op, n, timeout, timeout=timeout, op=op))

    def _close(self, cancel_pending_enqueues: bool) -> None:
        self._call("close", bool(cancel_pending_enqueues), timeout=0.0, op="close")

    def _size(self) -> int:
        return int(self._call("size", timeout=0.0, op="size"))

    def is_closed(self) -> bool:
        return bool(self._call("is_closed", timeout=0.0, op="is_closed"))

    def __repr__(self) -> str:
        dtypes = [d.name for d in self.dtypes]
        return f"<RemoteQueue {self.kind} {self.name!r} on {self.worker} capacity={self.capacity} dtypes={dtypes}>"


def held_here(queue: RemoteQueue):
    """The eager queue behind the proxy `queue` when the calling process is the worker that
    holds it (its calls then skip Dask's RPC), else `queue` itself: both have the same methods.

    >>> held_here("not a proxy")
    'not a proxy'
    """
    if not isinstance(queue, RemoteQueue):
        return queue
    try:
        held = _compat.require_distributed().get_worker().state.actors.get(queue._actor.key)
    except (ValueError, AttributeError, ImportError):  # not on a worker, or a Dask without these
        return queue
    return held.queue if isinstance(held, QueueActor) else queue


serve_remote_queues(create)
