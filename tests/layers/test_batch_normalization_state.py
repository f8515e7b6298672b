"""BatchNormalization's moving statistics change only when a batch has rows to learn from."""

import numpy as np
import pytest

import tapeflow as tp


@pytest.mark.parametrize("jit", [True, False])
def test_an_empty_batch_leaves_batch_normalization_as_it_was(jit):
    layer = tp.layers.BatchNormalization()
    layer(tp.tensor(np.random.default_rng(0).normal(size=(4, 3)).astype("float32")), training=True)
    before = [w.copy() for w in layer.get_weights()]
    empty = np.zeros((0, 3), "float32")
    call = tp.function(lambda x: layer(x, training=True)) if jit else (lambda x: layer(x, training=True))
    out = call(tp.tensor(empty))
    assert tuple(out.shape) == (0, 3)
    for a, b in zip(layer.get_weights(), before, strict=True):
        np.testing.assert_array_equal(a, b)
