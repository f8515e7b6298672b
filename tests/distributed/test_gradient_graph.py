"""The replicas' frozen gradient step with an Embedding: its sparse gradient arrives at
the parameter server densified, or, with `sparse=True`, as the rows and ids of the
batch alone (`SparseRows`)."""

from __future__ import annotations

import numpy as np
import pytest

import tapeflow as tp
from tapeflow.distributed.gradient_graph import GradientRunner, freeze_gradient_step
from tapeflow.distributed.parameters.variable_blocks import Block
from tapeflow.distributed.sparse_rows import SparseRows


def test_embedding_gradient_is_densified_for_the_parameter_server():
    rng = np.random.default_rng(2)
    model = tp.Sequential([tp.Input((3,), dtype="int64"), tp.layers.Embedding(20, 4), tp.layers.Flatten()])
    model.compile(optimizer="sgd", loss="mse")
    x = rng.integers(0, 20, (6, 3))
    y = rng.standard_normal((6, 12)).astype(np.float32)
    graphs, layout, variables = freeze_gradient_step(model, x, y, shard_sizes=[6], with_predictions=False)
    loss, arrays, _ = GradientRunner(graphs, layout).run([v.numpy() for v in variables], x, y)

    with tp.GradientTape() as tape:
        eager_loss = model.loss(y, model(x, training=True))
    (expected,) = tape.gradient(eager_loss, model.trainable_weights)
    assert isinstance(expected, tp.IndexedSlices)
    assert len(arrays) == 1 and arrays[0].shape == (20, 4)
    np.testing.assert_allclose(arrays[0], np.asarray(expected), rtol=1e-5, atol=1e-7)
    np.testing.assert_allclose(float(loss), float(eager_loss), rtol=1e-6)
    untouched = np.setdiff1d(np.arange(20), x)
    assert not arrays[0][untouched].any()


def test_embedding_gradient_stays_sparse_when_asked_and_splits_by_row_block():
    rng = np.random.default_rng(3)
    model = tp.Sequential(
        [tp.Input((3,), dtype="int64"), tp.layers.Embedding(20, 4), tp.layers.Flatten(), tp.layers.Dense(2)]
    )
    model.compile(optimizer="sgd", loss="mse")
    x = rng.integers(0, 20, (6, 3))
    y = rng.standard_normal((6, 2)).astype(np.float32)
    graphs, layout, variables = freeze_gradient_step(model, x, y, shard_sizes=[6], with_predictions=False, sparse=True)
    assert layout.sparse == (0,)
    _, arrays, _ = GradientRunner(graphs, layout).run([v.numpy() for v in variables], x, y)

    with tp.GradientTape() as tape:
        eager_loss = model.loss(y, model(x, training=True))
    expected = [np.asarray(g) for g in tape.gradient(eager_loss, model.trainable_weights)]
    table = arrays[0]
    assert isinstance(table, SparseRows) and table.values.shape == (x.size, 4)
    np.testing.assert_array_equal(np.sort(table.indices), np.sort(x.ravel()))
    np.testing.assert_allclose(table.dense((20, 4)), expected[0], rtol=1e-5, atol=1e-7)
    for got, want in zip(arrays[1:], expected[1:], strict=True):
        np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-7)
    low, high = Block(0, (0, 10), 0).take(table), Block(0, (10, 20), 1).take(table)
    assert len(low.indices) + len(high.indices) == x.size
    np.testing.assert_allclose(np.concatenate([low.dense((10, 4)), high.dense((10, 4))]), expected[0], rtol=1e-5)


def test_pushed_gradient_bytes_do_not_grow_with_the_table():
    x = np.random.default_rng(5).integers(0, 1000, (8, 3))
    y = np.zeros((8, 12), np.float32)
    pushed = {}
    for rows in (10**5, 10**6):
        model = tp.Sequential([tp.Input((3,), dtype="int64"), tp.layers.Embedding(rows, 4), tp.layers.Flatten()])
        model.compile(optimizer="sgd", loss="mse")
        graphs, layout, variables = freeze_gradient_step(
            model, x, y, shard_sizes=[8], with_predictions=False, sparse=True
        )
        _, (table,), _ = GradientRunner(graphs, layout).run([v.numpy() for v in variables], x, y)
        blocks = [Block(0, (0, rows // 2), 0), Block(0, (rows // 2, rows), 1)]
        pushed[rows] = sum(b.take(table).nbytes for b in blocks)
    assert pushed[10**6] == pushed[10**5] == x.size * (8 + 4 * 4)


def _dense_model(optimizer):
    tp.random.seed(4)
    model = tp.Sequential([tp.Input((3,)), tp.layers.Dense(4, activation="tanh"), tp.layers.Dense(2)])
    model.compile(optimizer=optimizer, loss="mse")
    return model


def _eager_gradients(model, x, y, sample_weight=None):
    with tp.GradientTape() as tape:
        loss = model.compute_loss(y=tp.tensor(y), y_pred=model(x, training=True), sample_weight=sample_weight)
    return float(loss), [np.asarray(g) for g in tape.gradient(loss, model.trainable_weights)]


def test_the_replica_step_returns_unscaled_gradients_under_loss_scaling():
    rng = np.random.default_rng(6)
    x, y = rng.standard_normal((6, 3)).astype(np.float32), rng.standard_normal((6, 2)).astype(np.float32)
    for built in (False, True):  # the scale a constant, or the optimizer's Variable
        model = _dense_model(tp.optimizers.LossScaleOptimizer(tp.optimizers.SGD(0.1), initial_scale=1024.0))
        if built:
            model.optimizer.build(model.trainable_weights)
        graphs, layout, variables = freeze_gradient_step(model, x, y, shard_sizes=[6], with_predictions=False)
        loss, arrays, _ = GradientRunner(graphs, layout).run([v.numpy() for v in variables], x, y)
        eager_loss, expected = _eager_gradients(model, x, y)
        np.testing.assert_allclose(float(loss), eager_loss, rtol=1e-6)
        for got, want in zip(arrays, expected, strict=True):
            np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-7)


def test_the_replica_step_takes_sample_weights_when_traced_with_them():
    rng = np.random.default_rng(7)
    x, y = rng.standard_normal((6, 3)).astype(np.float32), rng.standard_normal((6, 2)).astype(np.float32)
    weights = np.array([1.0, 0.0, 2.0, 0.5, 1.0, 0.0], np.float32)
    model = _dense_model("sgd")
    graphs, layout, variables = freeze_gradient_step(
        model, x, y, shard_sizes=[6], with_predictions=False, sample_weight=weights
    )
    runner = GradientRunner(graphs, layout)
    loss, arrays, _ = runner.run([v.numpy() for v in variables], x, y, sample_weight=weights)
    eager_loss, expected = _eager_gradients(model, x, y, weights)
    assert layout.weighted and eager_loss != pytest.approx(_eager_gradients(model, x, y)[0])
    np.testing.assert_allclose(float(loss), eager_loss, rtol=1e-6)
    for got, want in zip(arrays, expected, strict=True):
        np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-7)
    with pytest.raises(ValueError, match="this gradient step needs sample weights"):
        runner.run([v.numpy() for v in variables], x, y)
