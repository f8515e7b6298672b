"""Functional models: multiple inputs and outputs, shared layers, training, clear errors."""

import numpy as np
import pytest

import tapeflow as tp


def test_multi_input_multi_output_matches_the_same_layers_called_eagerly():
    a, b = tp.layers.Input(shape=(3,)), tp.layers.Input(shape=(2,))
    dense_a, dense_out = tp.layers.Dense(4, activation="tanh"), tp.layers.Dense(1)
    joined = tp.layers.Concatenate()([dense_a(a), b])
    model = tp.Model(inputs=[a, b], outputs=[dense_out(joined), joined])
    xa, xb = np.random.default_rng(0).random((5, 3)), np.random.default_rng(1).random((5, 2))
    out, hidden = model([xa, xb])
    expected_hidden = np.concatenate([dense_a(xa).numpy(), xb.astype("float32")], axis=1)
    np.testing.assert_allclose(hidden.numpy(), expected_hidden, rtol=1e-6)
    np.testing.assert_allclose(out.numpy(), dense_out(expected_hidden).numpy(), rtol=1e-6)
    assert len(model.trainable_weights) == 4
    assert model.layers[:3] == [a.input_layer, b.input_layer, dense_a]  # the InputLayers first, as in Keras


def test_shared_layer_is_one_set_of_weights():
    x = tp.layers.Input(shape=(3,))
    shared = tp.layers.Dense(3)
    model = tp.Model(x, shared(shared(x)))
    assert len(model.trainable_weights) == 2
    value = np.ones((2, 3), "float32")
    np.testing.assert_allclose(model(value).numpy(), shared(shared(value)).numpy(), rtol=1e-6)


def test_output_shapes_come_from_the_layer_calls():
    x = tp.layers.Input(shape=(6,))
    inner = tp.Sequential([tp.layers.Dense(4), tp.layers.Dense(3)])  # built by its symbolic call, as in Keras
    hidden = inner(x)
    model = tp.Model(x, {"logits": tp.layers.Dense(2)(hidden), "hidden": hidden})
    assert model.compute_output_shape((5, 6)) == {"hidden": (5, 3), "logits": (5, 2)}
    assert all(layer.built for layer in inner.layers) and model.count_params() == 28 + 15 + 8
    model(np.ones((1, 6)))
    assert model.compute_output_shape((None, 6)) == {"hidden": (None, 3), "logits": (None, 2)}


def test_functional_model_trains_with_fit():
    rng = np.random.default_rng(3)
    x = rng.standard_normal((64, 4)).astype("float32")
    y = (x[:, 0] > 0).astype("int64")
    inputs = tp.layers.Input(shape=(4,))
    outputs = tp.layers.Dense(2)(tp.layers.Dense(8, activation="relu")(inputs))
    model = tp.Model(inputs, outputs)
    model.compile(tp.optimizers.Adam(0.05), tp.losses.SparseCategoricalCrossentropy(from_logits=True), ["accuracy"])
    history = model.fit(x, y, batch_size=16, epochs=10, verbose=0, seed=0)
    assert history.history["loss"][-1] < 0.5 * history.history["loss"][0]
    assert model.evaluate(x, y, return_dict=True)["accuracy"] > 0.9


def test_errors_name_the_problem():
    x, other = tp.layers.Input(shape=(3,)), tp.layers.Input(shape=(3,))
    with pytest.raises(ValueError, match="not among the model's inputs"):
        tp.Model(x, tp.layers.Dense(1)(other))
    model = tp.Model(x, tp.layers.Dense(1)(x))
    with pytest.raises(ValueError, match="expected 1 inputs, got 2"):
        model([np.ones((1, 3)), np.ones((1, 3))])
    with pytest.raises(ValueError, match="symbolic"):
        tp.Model(np.ones(3), tp.layers.Dense(1)(x))
