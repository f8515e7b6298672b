"""The step log's `closed` wait, which tells a replica still computing a step that its
result is no longer wanted."""

from __future__ import annotations

import asyncio

from tapeflow.distributed.sync.epoch_plan import EpochPlan
from tapeflow.distributed.sync.step_log import StepLog


def _plan() -> EpochPlan:
    return EpochPlan(first_step=0, batch_sizes=(6, 6), replicas=1, backup_workers=1)


def test_closed_answers_once_the_step_has_its_shards():
    async def scenario():
        log = StepLog()
        await log.begin_epoch(_plan())
        waiting = asyncio.create_task(log.closed(0, timeout=5.0))
        await asyncio.sleep(0.01)
        assert not waiting.done()  # nothing committed yet
        assert await log.commit(0, shard=1, replica=1, rows=3, loss=0.5)
        already = await log.closed(0, timeout=5.0)
        return await waiting, already, await log.commit(0, shard=0, replica=0, rows=3, loss=0.7)

    closed, already, late = asyncio.run(scenario())
    assert closed and already and not late


def test_closed_gives_up_on_timeout_and_on_stop():
    async def scenario():
        log = StepLog()
        await log.begin_epoch(_plan())
        timed_out = await log.closed(1, timeout=0.05)
        waiting = asyncio.create_task(log.closed(1, timeout=5.0))
        await asyncio.sleep(0.01)
        await log.stop()
        return timed_out, await waiting

    assert asyncio.run(scenario()) == (False, False)
