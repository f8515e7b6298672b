"""Dask tasks and actor calls as the strategies use them: values copied to each worker
under keys of their own, long-running tasks pinned to workers, and every wait bounded.

>>> futures_of([None, [1, 2], 3])
[1, 2, 3]
"""

from __future__ import annotations

import concurrent.futures
import time

_STOP_WAIT = 2.0  # seconds to release the actors of an abandoned placement
_WATCH_EVERY = 0.5  # seconds between calls of `watch` while a call waits


class PerWorker:
    """One value scattered to several workers as one future per worker, each under a key of
    its own: no key is held by two workers, so Dask never copies or drops a replica of it
    under a long-running replica task that reads it (its memory manager would try to, and
    a worker told to drop data a seceded task holds dies)."""

    def __init__(self, futures: dict):
        self.futures = futures

    def on(self, worker: str):
        return self.futures[worker]


def scatter_to_each(client, items: list, workers, timeout: float) -> list[PerWorker]:
    """`items`, each scattered to every worker of `workers` separately (see `PerWorker`)."""
    copies = {w: client.scatter(items, workers=[w], hash=False, timeout=timeout) for w in workers}
    return [PerWorker({w: copies[w][i] for w in workers}) for i in range(len(items))]


def futures_of(values) -> list:
    """The Dask futures among `values` (PerWorker copies, lists of them, or futures)."""
    out = []
    for value in values:
        if isinstance(value, PerWorker):
            out += value.futures.values()
        elif isinstance(value, list | tuple):
            out += futures_of(value)
        elif value is not None:
            out.append(value)
    return out


def _on(value, worker: str):
    """`value` as the task on `worker` takes it: its copy there for PerWorker values."""
    if isinstance(value, PerWorker):
        return value.on(worker)
    if isinstance(value, list) and any(isinstance(v, PerWorker) for v in value):
        return [_on(v, worker) for v in value]
    return value


def launch_replicas(client, run, jobs, workers, shared: tuple) -> list:
    """One long-running task per replica, pinned to its worker: `run(job, *shared)`, where
    a `PerWorker` value (or a list of them) is the copy on the replica's worker."""
    return [
        client.submit(
            run, job, *[_on(v, worker) for v in shared], workers=[worker], allow_other_workers=False, pure=False
        )
        for job, worker in zip(jobs, workers, strict=True)
    ]


def start_actor(client, actor_class, *args, worker: str):
    """The future of an actor of `actor_class(*args)` pinned to `worker`."""
    return client.submit(actor_class, *args, actor=True, workers=[worker], allow_other_workers=False, pure=False)


def stop_actors(actors, alive) -> None:
    """Ask each actor of the (actor, worker) pairs `actors` whose worker is in `alive` to
    stop, waiting at most `_STOP_WAIT` seconds for all of them (best effort: an actor
    already gone has nothing to release)."""
    alive, calls = set(alive), []
    for actor, worker in actors:
        if worker in alive:
            try:
                calls.append(actor.stop())
            except Exception:  # noqa: BLE001 - an actor already gone has nothing to release
                pass
    deadline = time.monotonic() + _STOP_WAIT
    for call in calls:
        try:
            call.result(timeout=max(deadline - time.monotonic(), 0.01))
        except Exception:  # noqa: BLE001 - as above
            pass


def watched_result(future, what: str, timeout: float, watch, deadline: float | None = None, method: str = "fit"):
    """The result of a Dask or actor future, calling `watch` (which may raise, when a
    worker died) every half second; a TimeoutError naming `method` and `what` at
    `deadline` (`timeout` seconds from now by default)."""
    deadline = time.monotonic() + timeout if deadline is None else deadline
    while True:
        try:
            return future.result(timeout=min(_WATCH_EVERY, max(deadline - time.monotonic(), 0.01)))
        except TimeoutError:
            if future.done():  # it ended as the wait did: its own result, or its own error
                return future.result()
        if time.monotonic() >= deadline:
            raise TimeoutError(f"{method}: {what} did not answer within {timeout:g}s")
        watch()


def actor_answer(call, timeout: float, what: str):
    """The result of an actor call made on a worker, or a TimeoutError naming who did not
    answer. The wait is a little longer than the actors' own, so that their more precise
    errors come first."""
    wait = timeout + 5.0
    try:
        return call.result(timeout=wait)
    except (TimeoutError, concurrent.futures.TimeoutError):
        if call.done():  # it ended as the wait did: its own result, or its own error
            return call.result()
        raise TimeoutError(f"replica: {what} did not answer within {wait:g}s") from None


def raise_failed(futures) -> None:
    """Re-raise the error of a failed replica task, or say which was lost."""
    for future in futures:
        if future.status == "error":
            future.result()
        if future.status in ("cancelled", "lost"):
            raise RuntimeError(f"fit: replica task {future.key} was {future.status} (its worker may have died)")
