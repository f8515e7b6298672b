"""A `ParameterShard` holding an embedding table, driven directly (no cluster): sparse
pushes update only the rows they name, and the answer to a push carries only the rows
the step changed, so the bytes of a step do not grow with the table."""

import asyncio

import numpy as np

import tapeflow as tp
from tapeflow.distributed.parameters.variable_blocks import Block
from tapeflow.distributed.sparse_rows import SparseRows
from tapeflow.distributed.sync.epoch_plan import EpochPlan
from tapeflow.distributed.sync.parameter_shard import ParameterShard

WIDTH = 4


def one_step(rows: int, ids: list[np.ndarray], grads: list[np.ndarray]):
    """(table before, answer to the last push, whole table after) of one step with two shards' pushes."""
    table = np.random.default_rng(0).standard_normal((rows, WIDTH)).astype(np.float32)
    config = tp.optimizers.serialize(tp.optimizers.Adam(0.01))

    async def run():
        shard = ParameterShard([Block(0, None, 0)], ["table"], [True], [False], config, 30.0)
        plan = EpochPlan(first_step=0, batch_sizes=(sum(len(i) for i in ids),), replicas=2)
        await shard.begin_epoch(plan, [table], [{}], iterations=0, learning_rate=None)
        first = asyncio.create_task(shard.push(0, 1, len(ids[1]), [SparseRows(ids[1], grads[1])]))
        answer = await shard.push(0, 0, len(ids[0]), [SparseRows(ids[0], grads[0])])
        await first
        _, _, (whole,) = await shard.pull(1)
        return answer, whole

    answer, whole = asyncio.run(run())
    return table, answer, whole


def reference(table, ids, grads):
    """The same step in one process: Adam on the IndexedSlices of the rows-weighted mean gradient."""
    var = tp.Variable(table)
    total = sum(len(i) for i in ids)
    values = np.concatenate([g * np.float32(len(i) / total) for i, g in zip(ids, grads, strict=True)])
    tp.optimizers.Adam(0.01).apply_gradients([(tp.IndexedSlices(values, np.concatenate(ids), table.shape), var)])
    return var.numpy()


def test_a_push_is_answered_with_the_changed_rows_only():
    rng = np.random.default_rng(1)
    ids = [np.array([3, 7, 3]), np.array([7, 40])]
    grads = [rng.standard_normal((len(i), WIDTH)).astype(np.float32) for i in ids]
    table, (status, step, (delta,)), whole = one_step(50, ids, grads)
    assert (status, step) == ("ok", 1)
    assert isinstance(delta, SparseRows)
    np.testing.assert_array_equal(delta.indices, [3, 7, 40])
    np.testing.assert_array_equal(delta.values, whole[[3, 7, 40]])
    np.testing.assert_allclose(whole, reference(table, ids, grads), rtol=1e-6, atol=1e-7)
    untouched = np.setdiff1d(np.arange(50), [3, 7, 40])
    assert whole[untouched].tobytes() == table[untouched].tobytes()


def test_step_bytes_do_not_grow_with_the_table():
    ids = [np.array([5, 9000, 5]), np.array([77, 60_000])]
    grads = [np.ones((len(i), WIDTH), np.float32) for i in ids]
    moved = {}
    for rows in (10**5, 10**6):
        _, (_, _, (delta,)), _ = one_step(rows, ids, grads)
        moved[rows] = sum(SparseRows(i, g).nbytes for i, g in zip(ids, grads, strict=True)) + delta.nbytes
    assert moved[10**5] == moved[10**6] == (5 + 4) * (8 + WIDTH * 4)
