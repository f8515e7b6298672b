"""`UpdateLog`: a Dask Actor that hands out an epoch's batches to the asynchronous
replicas, numbers their updates, measures each update's staleness and records it.

`take` gives the next batch (by its position in the epoch's order) to whichever replica
asks, or None when all are taken. A replica that has computed its gradient `commit`s it
with the versions of the parameter shards it pulled (how many updates each had applied).
The log gives the update the next step number t, the order in which every shard will
apply it, and its staleness: t - min(pulled), the number of other updates ordered
between the oldest part of its parameters and itself. With a staleness bound k, an
update staler than k gets no step (it is dropped and never pushed). Either way the
commit is recorded for the client's `wait`, and answers with the replica's next batch.

>>> async def three_commits():
...     log = UpdateLog(staleness_bound=0)
...     await log.begin_epoch(first_step=5, batches=3)
...     a, b = await log.take(), await log.take()
...     first = await log.commit(a, replica=0, pulled=(5, 5), loss=1.0)
...     late = await log.commit(b, replica=1, pulled=(5, 5), loss=1.0)  # step 5 landed since its pull
...     return first, late, [(r["batch"], r["step"], r["staleness"]) for r in await log.wait(1.0)]
>>> asyncio.run(three_commits())
((5, 2), (None, None), [(0, 5, 0), (1, None, 1)])
"""

from __future__ import annotations

import asyncio


class UpdateLog:
    """Batches out, updates in order, staleness measured (see the module docstring);
    `staleness_bound` is None (apply every update) or the largest staleness applied."""

    def __init__(self, staleness_bound: int | None = None):
        self.staleness_bound = staleness_bound
        self.next_step = 0
        self.next_batch = 0
        self.batches = 0
        self.records: list[dict] = []
        self.stopped = False
        self._recorded = asyncio.Condition()

    async def begin_epoch(self, first_step: int, batches: int) -> None:
        """Start an epoch of `batches` batches, whose first update is step `first_step`."""
        async with self._recorded:
            self.next_step, self.next_batch, self.batches = int(first_step), 0, int(batches)
            self.records, self.stopped = [], False

    async def take(self) -> int | None:
        """The next batch of the epoch, or None when every batch is taken (or after `stop`)."""
        if self.stopped or self.next_batch >= self.batches:
            return None
        self.next_batch += 1
        return self.next_batch - 1

    async def commit(self, batch: int, replica: int, pulled, loss: float, predictions=None):
        """(step, next batch): the step at which this update is applied (None if dropped),
        and what `take` answers."""
        if self.stopped:
            return None, None
        staleness = self.next_step - min(pulled)
        step = None
        if self.staleness_bound is None or staleness <= self.staleness_bound:
            step, self.next_step = self.next_step, self.next_step + 1
        record = {
            "batch": int(batch),
            "replica": int(replica),
            "step": step,
            "pulled": tuple(int(v) for v in pulled),
            "staleness": int(staleness),
            "loss": float(loss),
            "predictions": predictions,
        }
        async with self._recorded:
            self.records.append(record)
            self._recorded.notify_all()
        return step, await self.take()

    async def wait(self, timeout: float) -> list[dict]:
        """The commits recorded since the last `wait`, in commit order, waiting up to
        `timeout` seconds for at least one."""
        async with self._recorded:
            try:
                await asyncio.wait_for(self._recorded.wait_for(lambda: self.records or self.stopped), timeout)
            except asyncio.TimeoutError:
                return []
            records, self.records = self.records, []
            return records

    async def stop(self) -> None:
        """End the epoch early: no more batches, and every later commit is refused."""
        async with self._recorded:
            self.stopped = True
            self._recorded.notify_all()
