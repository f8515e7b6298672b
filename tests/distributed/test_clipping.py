"""Clipping by norm (`clipnorm`, `global_clipnorm`) in distributed training, on a real
LocalCluster (worker processes on 127.0.0.1).

The reference is single-process `fit` on the same data from the same weights: the
distributed step must clip the whole step's gradients as one process would, although
parameter shards or pipeline stages each hold only part of them. The clip values are
small enough that every step clips, which the tests check by training once unclipped.
"""

import asyncio

import numpy as np
import pytest

import tapeflow as tp
from tapeflow import _compat
from tapeflow.distributed.parameters.deployment import ShardSpec
from tapeflow.distributed.parameters.variable_blocks import Block, join_blocks
from tapeflow.distributed.sync.deployment import _norm_parties
from tapeflow.distributed.sync.epoch_plan import EpochPlan
from tapeflow.distributed.sync.parameter_shard import ParameterShard
from tapeflow.distributed.sync.step_log import StepLog

pytestmark = [
    pytest.mark.skipif(not _compat.has_dask, reason="needs dask[distributed]"),
    pytest.mark.timeout(120),
]

N, BATCH = 40, 16  # batches of 16, 16 and 8 rows
CLIPPING = {"global_clipnorm": 0.05, "clipnorm": 0.02}


@pytest.fixture(scope="module")
def cluster():
    with tp.distributed.Cluster(n_workers=2, memory_limit="1GiB") as cluster:
        cluster.client.wait_for_workers(2, timeout=60)
        yield cluster


def make_model(**clipping):
    tp.random.seed(7)
    model = tp.Sequential([tp.layers.Dense(16, activation="tanh"), tp.layers.Dense(5)])
    model(np.zeros((1, 12), np.float32))
    loss = tp.losses.SparseCategoricalCrossentropy(from_logits=True)
    model.compile(optimizer=tp.optimizers.SGD(0.1, momentum=0.9, **clipping), loss=loss)
    return model


def data():
    rng = np.random.default_rng(0)
    return rng.standard_normal((N, 12)).astype(np.float32), rng.integers(0, 5, N)


def trained(distribute=None, epochs=1, **clipping) -> list[np.ndarray]:
    x, y = data()
    model = make_model(**clipping)
    model.fit(x, y, batch_size=BATCH, epochs=epochs, shuffle=False, verbose=0, distribute=distribute)
    return model.get_weights()


def assert_same(got, expected, atol=1e-5):
    for g, e in zip(got, expected, strict=True):
        np.testing.assert_allclose(g, e, rtol=0, atol=atol)


def assert_clipping_changed(clipped, unclipped):
    assert max(float(np.max(np.abs(c - u))) for c, u in zip(clipped, unclipped, strict=True)) > 1e-2


# ------------------------------------------------------------------ equality with one process
@pytest.mark.parametrize("option", sorted(CLIPPING))
def test_data_parallel_clips_as_one_process(cluster, option):
    clipping = {option: CLIPPING[option]}
    # 2 replicas, 2 parameter shards; with clipnorm the kernels are split by rows over both shards
    blocks = 64 if option == "clipnorm" else 1 << 20
    strategy = tp.distributed.DataParallel(cluster, replicas=2, row_block_bytes=blocks, timeout=30)
    got = trained(strategy, **clipping)
    assert {len(s.applied) for s in strategy.steps} == {2}
    expected = trained(**clipping)
    assert_same(got, expected)
    assert_clipping_changed(expected, trained())


@pytest.mark.parametrize("option", sorted(CLIPPING))
def test_a_sparse_embedding_gradient_split_over_shards_clips_as_one_process(cluster, option):
    rng = np.random.default_rng(4)
    x, y = rng.integers(0, 60, (24, 3)), rng.standard_normal((24, 1)).astype(np.float32)
    x[::2, 0] = 7  # a row named twice in a batch: its rows add up before the norm
    weights = []
    for distribute in (tp.distributed.DataParallel(cluster, replicas=2, row_block_bytes=64, timeout=30), None, None):
        tp.random.seed(11)
        layers = [tp.Input((3,), dtype="int64"), tp.layers.Embedding(60, 4), tp.layers.Flatten(), tp.layers.Dense(1)]
        model = tp.Sequential(layers)
        clipping = {option: CLIPPING[option]} if len(weights) < 2 else {}
        model.compile(optimizer=tp.optimizers.SGD(0.5, momentum=0.9, **clipping), loss="mse")
        model.fit(x, y, batch_size=8, epochs=1, shuffle=False, verbose=0, distribute=distribute)
        weights.append(model.get_weights())
    assert_same(weights[0], weights[1])
    assert_clipping_changed(weights[1], weights[2])


@pytest.mark.parametrize("option", sorted(CLIPPING))
def test_async_parameter_server_clips_each_update_as_one_process(cluster, option):
    clipping = {option: CLIPPING[option]}
    strategy = tp.distributed.AsyncParameterServer(cluster, replicas=1, timeout=30)
    assert_same(trained(strategy, **clipping), trained(**clipping))


@pytest.mark.parametrize("option", sorted(CLIPPING))
def test_pipeline_clips_as_one_process(cluster, option):
    clipping = {option: CLIPPING[option]}
    strategy = tp.distributed.Pipeline(cluster, stages=2, micro_batches=2)
    assert_same(trained(strategy, **clipping), trained(**clipping))


# ------------------------------------------------------------------ the exchange of norms
class CountingLog(StepLog):
    """A step log that counts the parameter shards' calls to add up sums of squares."""

    def __init__(self):
        super().__init__()
        self.calls = 0

    async def add_squares(self, *args):
        self.calls += 1
        return await super().add_squares(*args)


SPLIT = [[Block(0, (0, 2), 0), Block(1, None, 0)], [Block(0, (2, 4), 1)]]  # variable 0 split by rows
WHOLE = [[Block(0, None, 0)], [Block(1, None, 1)]]
ALONE = [[Block(0, None, 0), Block(1, None, 0)]]


def shard_steps(clipping: dict, layout: list, steps: int = 2):
    """Two replicas' pushes of `steps` steps to parameter shards holding the blocks of
    `layout` (per shard) of two variables; returns (the whole variables, the log's calls)."""
    config = tp.optimizers.serialize(tp.optimizers.SGD(0.5, **clipping))
    spec = ShardSpec(("v0", "v1"), ((4, 2), (3,)), (True, True), (True, True), config, 16)
    parties = _norm_parties(spec, layout)
    values, gradients = initial_values(), step_gradients()

    async def run():
        log, shards = CountingLog(), []
        for j, blocks in enumerate(layout):
            flags = [True] * len(blocks)
            shard = ParameterShard(blocks, [f"v{b.variable}" for b in blocks], flags, flags, config, 5.0)
            exchange = (log, parties.index(j), len(parties)) if j in parties else None
            parts = [b.take(values[b.variable]) for b in blocks]
            plan = EpochPlan(0, (4,) * steps, replicas=2)
            await shard.begin_epoch(plan, parts, [{}] * len(blocks), 0, None, (), exchange)
            shards.append(shard)
        for step in range(steps):
            pushes = [
                shard.push(step, replica, 2, [b.take(gradients[b.variable]) for b in blocks])
                for replica in range(2)
                for shard, blocks in zip(shards, layout, strict=True)
            ]
            await asyncio.wait_for(asyncio.gather(*pushes), 5.0)
        held = {b: v.numpy() for shard in shards for b, v in zip(shard.blocks, shard.variables, strict=True)}
        return join_blocks(held), log.calls

    return asyncio.run(run())


def initial_values():
    return [np.arange(8, dtype=np.float32).reshape(4, 2), np.ones(3, np.float32)]


def step_gradients():
    return [np.linspace(-3.0, 3.0, 8, dtype=np.float32).reshape(4, 2), np.full(3, -2.0, np.float32)]


def one_process(clipping: dict, steps: int = 2) -> list[np.ndarray]:
    variables = [tp.Variable(v) for v in initial_values()]
    optimizer = tp.optimizers.SGD(0.5, **clipping)
    for _ in range(steps):
        optimizer.apply_gradients(zip(map(tp.tensor, step_gradients()), variables, strict=True))
    return [v.numpy() for v in variables]


@pytest.mark.parametrize(
    ("option", "layout", "calls_per_step"),
    [
        ("global_clipnorm", SPLIT, 2),  # every shard, once
        ("global_clipnorm", WHOLE, 2),
        ("global_clipnorm", ALONE, 0),
        ("clipnorm", SPLIT, 2),  # the shards holding row blocks of variable 0
        ("clipnorm", WHOLE, 0),  # each variable's norm is its shard's own
        ("clipnorm", ALONE, 0),
    ],
)
def test_shards_add_up_sums_of_squares_in_one_call_each_per_step(option, layout, calls_per_step):
    clipping = {option: CLIPPING[option]}
    whole, calls = shard_steps(clipping, layout, steps=2)
    assert_same(whole, one_process(clipping), atol=1e-6)
    assert_clipping_changed(whole, one_process({}))
    assert calls == 2 * calls_per_step  # 2 steps; the replicas' calls per step do not change


def test_a_missing_shard_times_out_and_a_stop_releases_the_others():
    async def run():
        log = StepLog()
        with pytest.raises(TimeoutError, match="1 parameter shards did not send their sums of squares of step 3"):
            await log.add_squares(3, 0, {"global": 1.0}, 2, 0.05)
        waiting = asyncio.create_task(log.add_squares(4, 0, {"global": 1.0}, 2, 5.0))
        await asyncio.sleep(0.01)
        await log.stop()
        return await asyncio.wait_for(waiting, 5.0)

    assert asyncio.run(run()) is None
