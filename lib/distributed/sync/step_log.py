"""`StepLog`: a Dask Actor that decides which shard results each synchronous step applies
and keeps, per step, what the client reports to callbacks.

A replica `commit`s its shard's result (rows, loss, and the predictions when the model
has metrics) before pushing gradients. The first `plan.needed(step)` commits of a
step are accepted, in arrival order; later ones are refused, so a late shard is
dropped and never reaches the parameter servers. When a step has all its accepted
shards, its record (shards in shard order, with their replicas, rows and losses) waits
for the client's `wait` to take it. When gradients are clipped by a norm that spans
parameter shards, the shards `add_squares` here: each sends its sums of squares of a step
and gets back the sums over all of them.

>>> import asyncio
>>> from tapeflow.distributed.sync.epoch_plan import EpochPlan
>>> async def one_step():
...     log = StepLog()
...     await log.begin_epoch(EpochPlan(first_step=0, batch_sizes=(6,), replicas=1, backup_workers=1))
...     first = await log.commit(0, shard=1, replica=1, rows=3, loss=0.5)
...     late = await log.commit(0, shard=0, replica=0, rows=3, loss=0.7)
...     return first, late, await log.wait(0, 1.0)
>>> first, late, records = asyncio.run(one_step())
>>> first, late, [(r["step"], r["shards"]) for r in records]
(True, False, [(0, [(1, 1, 3, 0.5)])])
"""

from __future__ import annotations

import asyncio

from tapeflow.distributed.sync.epoch_plan import EpochPlan


class StepLog:
    """Accepts the first shard results of each step and records the step (see the module docstring)."""

    def __init__(self):
        self.plan: EpochPlan | None = None
        self.open: dict[int, dict] = {}
        self.done: list[dict] = []
        self.stopped = False
        self._changed = asyncio.Condition()
        self.squares: dict[int, dict] = {}  # step -> {parameter shard: its sums of squares}
        self.squared: dict[int, list] = {}  # step -> [the sums over the shards, shards yet to take them]
        self._summed = asyncio.Condition()

    async def begin_epoch(self, plan: EpochPlan) -> None:
        async with self._changed:
            self.plan, self.open, self.done, self.stopped = plan, {}, [], False

    async def commit(self, step: int, shard: int, replica: int, rows: int, loss: float, predictions=None) -> bool:
        """True if this shard's result is applied to `step`; False if the step is full (or stopped)."""
        if self.stopped or not self.plan.first_step <= step < self.plan.end:
            return False
        accepted = self.open.setdefault(step, {})
        if accepted is None or len(accepted) >= self.plan.needed(step):
            return False
        accepted[shard] = (replica, int(rows), float(loss), predictions)
        if len(accepted) == self.plan.needed(step):
            shards = sorted(accepted)
            record = {
                "step": step,
                "shards": [(s, *accepted[s][:3]) for s in shards],
                "predictions": [accepted[s][3] for s in shards],
            }
            self.open[step] = None  # closed: every later commit is refused
            async with self._changed:
                self.done.append(record)
                self._changed.notify_all()
        return True

    async def closed(self, step: int, timeout: float) -> bool:
        """Wait until `step` has all its accepted shards (True), or the log stops or `timeout`
        seconds pass (False): a replica still computing that step then drops its work."""
        async with self._changed:
            try:
                await asyncio.wait_for(
                    self._changed.wait_for(lambda: self.stopped or self.open.get(step, {}) is None), timeout
                )
            except asyncio.TimeoutError:
                return False
            return not self.stopped

    async def commit_all(self, results: list[tuple]) -> list[bool]:
        """`commit` each of several (step, shard, replica, rows, loss, predictions) results."""
        return [await self.commit(*result) for result in results]

    async def wait(self, step: int, timeout: float) -> list[dict]:
        """The records of `step` and later steps completed so far, in step order, waiting up to
        `timeout` seconds for at least one; each record is handed out once."""
        async with self._changed:
            try:
                await asyncio.wait_for(self._changed.wait_for(lambda: self.done or self.stopped), timeout)
            except asyncio.TimeoutError:
                return []
            records = sorted((r for r in self.done if r["step"] >= step), key=lambda r: r["step"])
            self.done = []
            return records

    async def add_squares(self, step: int, shard: int, squares: dict, parties: int, timeout: float) -> dict | None:
        """Once `parties` parameter shards have sent their `squares` ({key: sum of squares}) of
        `step`, the sum of each key over them (added in shard order, so every shard gets the
        same numbers); None if the log stops first, a TimeoutError after `timeout` seconds.

        >>> async def two_shards():
        ...     log = StepLog()
        ...     first = asyncio.create_task(log.add_squares(0, 1, {"global": 2.0}, 2, 5.0))
        ...     return await log.add_squares(0, 0, {"global": 1.0}, 2, 5.0), await first
        >>> asyncio.run(two_shards())
        ({'global': 3.0}, {'global': 3.0})
        """
        async with self._summed:
            parts = self.squares.setdefault(step, {})
            parts[shard] = squares
            if len(parts) == parties:
                keys = {key for part in parts.values() for key in part}
                totals = {key: sum(parts[s].get(key, 0.0) for s in sorted(parts)) for key in keys}
                self.squared[step] = [totals, parties]
                del self.squares[step]
                self._summed.notify_all()
            try:
                await asyncio.wait_for(self._summed.wait_for(lambda: self.stopped or step in self.squared), timeout)
            except asyncio.TimeoutError:
                raise TimeoutError(
                    f"step log: {parties - len(self.squares.get(step, ()))} parameter shards did not send their "
                    f"sums of squares of step {step} within {timeout:g}s"
                ) from None
            if self.stopped:
                return None
            answer = self.squared[step]
            answer[1] -= 1
            if not answer[1]:
                del self.squared[step]
            return answer[0]

    async def progress(self) -> int:
        """How many steps of the epoch have all their accepted shards."""
        return sum(1 for shards in self.open.values() if shards is None)

    async def stop(self) -> None:
        async with self._changed:
            self.stopped = True
            self._changed.notify_all()
        async with self._summed:
            self._summed.notify_all()
