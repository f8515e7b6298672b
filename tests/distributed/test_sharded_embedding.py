"""`ShardedEmbedding` on a real LocalCluster of 2 worker processes on 127.0.0.1.

The reference is a single-process embedding-bag model in the same test, whose table is
a Variable getting the sparse gradient of `embedding_lookup`: the sharded table and the
dense layer must train to the same parameters. Rows a step does not name, and a shard
no id of a batch falls in, must be byte-identical after the step, and the bytes moved
per step must not depend on the table's size. Every wait is bounded.
"""

import numpy as np
import pytest

import tapeflow as tp
from tapeflow import _compat

pytestmark = [
    pytest.mark.skipif(not _compat.has_dask, reason="needs dask[distributed]"),
    pytest.mark.timeout(240),
]

WIDTH, BAG, BATCH = 4, 3, 6
OPTIMIZERS = {
    "sgd": lambda: tp.optimizers.SGD(0.1),
    "momentum": lambda: tp.optimizers.SGD(0.1, momentum=0.9),
    "adam": lambda: tp.optimizers.Adam(0.01),
}


@pytest.fixture(scope="module")
def cluster():
    with tp.distributed.Cluster(n_workers=2, memory_limit="1GiB", timeout=120.0) as cluster:
        yield cluster


def bag_loss(table, ids, kernel, bias, y):
    """Mean squared error of a linear model on the mean of each bag's embeddings."""
    bags = tp.mean(tp.nn.embedding_lookup(table, ids), axis=1)
    return tp.mean(tp.square(tp.matmul(bags, kernel) + bias - y))


def data(rows: int, steps: int, seed: int = 0):
    rng = np.random.default_rng(seed)
    table = rng.standard_normal((rows, WIDTH)).astype(np.float32)
    kernel = rng.standard_normal((WIDTH, 1)).astype(np.float32)
    batches = [
        (rng.integers(0, rows, (BATCH, BAG)), rng.standard_normal((BATCH, 1)).astype(np.float32)) for _ in range(steps)
    ]
    return table, kernel, batches


def single_process(table, kernel, batches, optimizer):
    variables = [tp.Variable(table), tp.Variable(kernel), tp.Variable(np.zeros(1, np.float32))]
    for ids, y in batches:
        with tp.GradientTape() as tape:
            loss = bag_loss(variables[0], ids, variables[1], variables[2], y)
        grads = tape.gradient(loss, variables)
        assert isinstance(grads[0], tp.IndexedSlices)
        optimizer.apply_gradients(zip(grads, variables, strict=True))
    return [v.numpy() for v in variables]


def sharded_step(sharded, dense, optimizer, ids, y):
    """One step: pull the batch's rows, differentiate locally, push the sparse gradient."""
    unique, inverse, rows = sharded.pull(ids)
    rows_var = tp.Variable(rows)
    with tp.GradientTape() as tape:
        loss = bag_loss(rows_var, inverse, dense[0], dense[1], y)
    grad_rows, *grad_dense = tape.gradient(loss, [rows_var, *dense])
    optimizer.apply_gradients(zip(grad_dense, dense, strict=True))
    sharded.push(unique, grad_rows, step=optimizer.iterations)
    return unique


@pytest.mark.slow
@pytest.mark.parametrize("name", sorted(OPTIMIZERS))
def test_sharded_table_trains_like_the_single_process_model(cluster, name):
    table, kernel, batches = data(rows=50, steps=4)
    expected = single_process(table, kernel, batches, OPTIMIZERS[name]())
    optimizer = OPTIMIZERS[name]()
    dense = [tp.Variable(kernel), tp.Variable(np.zeros(1, np.float32))]
    with tp.distributed.ShardedEmbedding(cluster, table, optimizer, timeout=60.0) as sharded:
        assert len(sharded.bounds) == 2
        for ids, y in batches:
            before = sharded.numpy()
            unique = sharded_step(sharded, dense, optimizer, ids, y)
            after = sharded.numpy()
            untouched = np.setdiff1d(np.arange(len(table)), unique)
            assert after[untouched].tobytes() == before[untouched].tobytes()
            assert not np.array_equal(after[unique], before[unique])
        got = [sharded.numpy(), *(v.numpy() for v in dense)]
    for g, e in zip(got, expected, strict=True):
        np.testing.assert_allclose(g, e, rtol=1e-5, atol=1e-6)


def test_a_shard_no_id_falls_in_is_not_sent_anything_and_keeps_its_bytes(cluster):
    table, kernel, _ = data(rows=40, steps=0)
    optimizer = tp.optimizers.Adam(0.01)
    dense = [tp.Variable(kernel), tp.Variable(np.zeros(1, np.float32))]
    with tp.distributed.ShardedEmbedding(cluster, table, optimizer) as sharded:
        (start0, stop0), (start1, stop1) = sharded.bounds
        ids = np.random.default_rng(1).integers(start0, stop0, (BATCH, BAG))
        before = sharded.numpy()
        moved = sharded.bytes_moved
        unique = sharded_step(sharded, dense, optimizer, ids, np.ones((BATCH, 1), np.float32))
        after = sharded.numpy()
        assert after[start1:stop1].tobytes() == before[start1:stop1].tobytes()
        slots = sharded.shards[1].slots().result(timeout=60)
        assert all(not s.any() for s in slots.values())  # the second shard's optimizer never ran
        # pulled: ids + rows; pushed: ids + gradient rows, all to the first shard
        assert sharded.bytes_moved - moved == 2 * (unique.nbytes + len(unique) * WIDTH * 4)


@pytest.mark.slow
def test_bytes_moved_per_step_do_not_grow_with_the_table(cluster):
    per_step = {}
    for rows in (10**5, 10**6):
        table, kernel, batches = data(rows=rows, steps=3, seed=5)
        optimizer = tp.optimizers.SGD(0.1)
        dense = [tp.Variable(kernel), tp.Variable(np.zeros(1, np.float32))]
        with tp.distributed.ShardedEmbedding(cluster, table, optimizer) as sharded:
            counts = []
            for ids, y in batches:
                moved = sharded.bytes_moved
                unique = sharded_step(sharded, dense, optimizer, ids, y)
                counts.append(sharded.bytes_moved - moved)
                assert counts[-1] == 2 * (unique.nbytes + len(unique) * WIDTH * 4)
            assert sharded.setup_bytes == table.nbytes
        per_step[rows] = max(counts)
    assert per_step[10**6] <= per_step[10**5]
    assert per_step[10**6] < 10**5 * WIDTH * 4 / 100  # far below even the small table's size


def test_bad_tables_ids_and_optimizers_are_refused_by_name(cluster):
    with pytest.raises(ValueError, match="ShardedEmbedding: table must be a 2-D"):
        tp.distributed.ShardedEmbedding(cluster, np.zeros(5, np.float32), tp.optimizers.SGD(0.1))
    with pytest.raises(TypeError, match="ShardedEmbedding: table must hold floats"):
        tp.distributed.ShardedEmbedding(cluster, np.zeros((5, 2), np.int64), tp.optimizers.SGD(0.1))
    with pytest.raises(ValueError, match="weight_decay, clipnorm"):
        tp.distributed.ShardedEmbedding(cluster, np.zeros((5, 2), np.float32), tp.optimizers.SGD(0.1, clipnorm=1.0))

    class DenseSGD(tp.optimizers.SGD):
        def update_step(self, gradient, variable, learning_rate):
            variable.assign(variable - learning_rate * gradient)

    with pytest.raises(ValueError, match="its own update_step"):
        tp.distributed.ShardedEmbedding(cluster, np.zeros((5, 2), np.float32), DenseSGD(0.1))
    with tp.distributed.ShardedEmbedding(cluster, np.zeros((5, 2), np.float32), tp.optimizers.SGD(0.1)) as sharded:
        with pytest.raises(ValueError, match=r"ids must lie in \[0, 5\), got 0..5"):
            sharded.pull(np.array([0, 5]))
        with pytest.raises(TypeError, match="ids must be integers"):
            sharded.pull(np.array([0.5]))
        with pytest.raises(ValueError, match=r"dense gradient must have shape \(1, 2\)"):
            sharded.push(np.array([1]), np.zeros((2, 2), np.float32), step=1)
