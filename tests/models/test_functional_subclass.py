"""A Model subclass built as `Sub(inputs, outputs)` is a functional model that keeps the
subclass's methods, as in Keras."""

import keras
import numpy as np

import tapeflow as tp


def _built(lib):
    class Doubling(lib.Model):
        def predict_step(self, data):
            return super().predict_step(data) * 2.0

    inputs = lib.Input((3,))
    outputs = lib.layers.Dense(2, name="dense")(inputs)
    return Doubling(inputs, outputs), Doubling


def test_a_functional_subclass_keeps_its_methods_and_equals_keras():
    ours, cls = _built(tp)
    theirs, _ = _built(keras)
    assert isinstance(ours, cls) and isinstance(ours, tp.models.Functional) and type(ours).__name__ == "Doubling"
    assert [type(layer).__name__ for layer in ours.layers] == [type(layer).__name__ for layer in theirs.layers]
    theirs.set_weights(ours.get_weights())
    x = np.random.default_rng(0).normal(size=(5, 3)).astype("float32")
    np.testing.assert_allclose(ours.predict(x, verbose=0), theirs.predict(x, verbose=0), rtol=1e-5, atol=1e-6)


def test_a_subclass_with_its_own_constructor_is_not_made_functional():
    class Plain(tp.Model):
        def __init__(self, units, scale):
            super().__init__()
            self.dense, self.scale = tp.layers.Dense(units), scale

        def call(self, x):
            return self.dense(x) * self.scale

    model = Plain(2, 3.0)
    assert not isinstance(model, tp.models.Functional) and model(tp.ones((1, 4))).shape == (1, 2)
