"""The replicas' frozen gradient step with an Embedding: its sparse gradient arrives at
the parameter server as the dense array the optimizer expects."""

from __future__ import annotations

import numpy as np

import tapeflow as tp
from tapeflow.distributed.gradient_graph import GradientRunner, freeze_gradient_step


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
