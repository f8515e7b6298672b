"""Telling a dead worker from any other failure.

Dask's scheduler drops a worker as soon as its connection closes (a killed process,
within milliseconds here) and then reports the set of workers without it; an actor
call to a dead worker fails with "Worker holding Actor was lost" or an OSError, and a
task restricted to it never runs (or is cancelled, when the data it reads was there
alone). So the client asks the scheduler which of the workers it uses are gone. A
communication error is given a short grace to let the scheduler notice the loss; an
error with no lost worker behind it is the real error.

>>> lost_workers(["tcp://a:1", "tcp://b:2"], live=["tcp://b:2", "tcp://c:3"])
['tcp://a:1']
"""

from __future__ import annotations

import concurrent.futures
import time

from tapeflow import _compat

GRACE = 5.0  # seconds a communication error waits for the scheduler to report the lost worker
_POLL = 0.05
_WAIT_POLL = 0.1  # seconds between looks at the workers while waiting for more to join


class WorkerLost(RuntimeError):
    """Workers holding replicas, parameter shards or the step log left the cluster."""

    def __init__(self, workers):
        self.workers = sorted(workers)
        super().__init__(f"workers {self.workers} left the cluster")


def lost_workers(used, live) -> list[str]:
    """The workers of `used` not among `live`, sorted."""
    live = set(live)
    return sorted(w for w in set(used) if w not in live)


_SIGNS = ("Actor was lost", "Unable to contact", "Timed out trying to connect", "worker may have died")


def is_communication_error(error: BaseException) -> bool:
    """Whether `error` is how Dask reports an unreachable worker or actor, or a task cancelled
    because its worker and data were lost."""
    closed = _compat.require_distributed().comm.CommClosedError
    if isinstance(error, WorkerLost | concurrent.futures.CancelledError | closed):
        return True
    return isinstance(error, RuntimeError | OSError) and any(sign in str(error) for sign in _SIGNS)


def find_lost(cluster, used, error: BaseException | None = None) -> list[str]:
    """The workers of `used` that left `cluster`. After a communication `error`, waits up to
    `GRACE` seconds for the scheduler to report one; otherwise looks once."""
    deadline = time.monotonic() + (GRACE if error is not None and is_communication_error(error) else 0.0)
    while True:
        lost = lost_workers(used, cluster.workers)
        if lost or time.monotonic() >= deadline:
            return lost
        time.sleep(_POLL)


def wait_for_workers(cluster, need: int, timeout: float, method: str, who: str, lost=()) -> list[str]:
    """The workers alive in `cluster` once there are `need` of them, waiting up to `timeout`
    seconds; else a RuntimeError from `method` saying what `who` needs and naming the
    workers `lost` before."""
    deadline = time.monotonic() + timeout
    while True:
        workers = cluster.workers
        if len(workers) >= need:
            return workers
        if time.monotonic() > deadline:
            gone = f"workers {sorted(set(lost))} left the cluster; " if lost else ""
            raise RuntimeError(
                f"{method}: {gone}{who} needs {need} workers but {len(workers)} are alive "
                f"({', '.join(workers) or 'none'}), and no more joined within {timeout:g}s"
            )
        time.sleep(_WAIT_POLL)
