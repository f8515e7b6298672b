"""`DataParallel` with an Embedding keeps its gradient sparse from replica to parameter
shard (a real LocalCluster of 2 worker processes on 127.0.0.1): the table, cut into row
blocks over both shards, trains as in one process, where the optimizers update only
the rows a batch names (lazily, for Adam), and rows no batch names keep their bytes."""

import numpy as np
import pytest
from distributed_helpers import OPTIMIZERS

import tapeflow as tp
from tapeflow import _compat

pytestmark = [
    pytest.mark.skipif(not _compat.has_dask, reason="needs dask[distributed]"),
    pytest.mark.timeout(240),
]

ROWS, WIDTH, BAG, N, BATCH = 60, 4, 3, 24, 8


@pytest.fixture(scope="module")
def cluster():
    with tp.distributed.Cluster(n_workers=2, memory_limit="1GiB", timeout=120.0) as cluster:
        yield cluster


def twins(optimizer):
    models = []
    for _ in range(2):
        tp.random.seed(11)
        model = tp.Sequential(
            [
                tp.Input((BAG,), dtype="int64"),
                tp.layers.Embedding(ROWS, WIDTH),
                tp.layers.Flatten(),
                tp.layers.Dense(1),
            ]
        )
        model.compile(optimizer=OPTIMIZERS[optimizer](), loss="mse")
        models.append(model)
    return models


@pytest.mark.slow
@pytest.mark.parametrize("optimizer", sorted(OPTIMIZERS))
def test_sharded_embedding_table_trains_as_in_one_process(cluster, optimizer):
    rng = np.random.default_rng(4)
    x = rng.integers(0, ROWS // 2, (N, BAG))  # the upper half of the table is never named
    x[:, 0] = rng.integers(ROWS // 2 + 10, ROWS, N)  # except the top rows: both row blocks are used
    y = rng.standard_normal((N, 1)).astype(np.float32)
    single, spread = twins(optimizer)
    initial = spread.get_weights()[0].copy()
    single.fit(x, y, batch_size=BATCH, epochs=2, seed=3, verbose=0)
    strategy = tp.distributed.DataParallel(cluster, replicas=2, row_block_bytes=64, timeout=60)
    spread.fit(x, y, batch_size=BATCH, epochs=2, seed=3, verbose=0, distribute=strategy)
    for got, want in zip(spread.get_weights(), single.get_weights(), strict=True):
        np.testing.assert_allclose(got, want, rtol=2e-5, atol=2e-6)
    for key, got, want in zip(
        single.optimizer.get_state(),
        spread.optimizer.get_state().values(),
        single.optimizer.get_state().values(),
        strict=True,
    ):
        np.testing.assert_allclose(got, want, rtol=2e-5, atol=2e-6, err_msg=key)
    untouched = np.setdiff1d(np.arange(ROWS), x)
    assert len(untouched) >= 5
    assert spread.get_weights()[0][untouched].tobytes() == initial[untouched].tobytes()
