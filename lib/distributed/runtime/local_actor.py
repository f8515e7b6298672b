"""Calls on an actor that lives in the caller's own worker process, without the network.

Dask sends a task's call on an actor through the worker's RPC even when the actor sits
in the same process: the arguments are serialized, sent through the loopback interface
and read back. A replica calls the parameter shard on its own worker every step with
megabytes of gradients, so `in_process` hands it a stand-in that schedules the actor's
coroutine on the worker's event loop directly, where Dask would have run it too. The
arrays pass by reference, which is safe because tapeflow never writes a tensor's array
in place (a Variable's update binds a new array).

>>> class Counter:
...     async def add(self, n):
...         return n + 1
>>> in_process(Counter()).__class__.__name__  # no worker here: the handle is returned as it is
'Counter'
"""

from __future__ import annotations

import asyncio
import inspect

from tapeflow import _compat


def in_process(actor):
    """`actor`, or, when called from a task on the worker that holds it, a stand-in whose
    coroutine methods return `concurrent.futures.Future`s (which have the `result(timeout)`
    and `done()` of Dask's ActorFuture)."""
    try:
        worker = _compat.require_distributed().get_worker()
        held = worker.state.actors.get(actor.key)
        loop = worker.loop.asyncio_loop
    except (ValueError, AttributeError, ImportError):  # not in a worker, or a Dask without these
        return actor
    return actor if held is None else _Direct(held, loop)


class _Direct:
    """Runs an actor object's coroutine methods on its worker's event loop."""

    def __init__(self, held, loop: asyncio.AbstractEventLoop):
        self._held, self._loop = held, loop

    def __getattr__(self, name: str):
        method = getattr(self._held, name)
        if not inspect.iscoroutinefunction(method):
            raise TypeError(f"in_process: {type(self._held).__name__}.{name} is not a coroutine method")
        return lambda *args, **kwargs: asyncio.run_coroutine_threadsafe(method(*args, **kwargs), self._loop)
