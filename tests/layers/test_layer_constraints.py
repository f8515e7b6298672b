"""Weight constraints given to layers hold after every optimizer update, frozen and eager,
as on Keras 3 (same weights, same data, same updates), and survive the config round trip."""

import os

os.environ.setdefault("KERAS_BACKEND", "torch")

import numpy as np  # noqa: E402
import pytest  # noqa: E402

import tapeflow as tp  # noqa: E402

keras = pytest.importorskip("keras")
RNG = np.random.default_rng(5)
X = RNG.normal(size=(32, 4)).astype("float32")
Y = RNG.normal(size=(32, 3)).astype("float32")


def _model(lib):
    return lib.Sequential(
        [
            lib.Input((4,)),
            lib.layers.Dense(5, activation="tanh", kernel_constraint=lib.constraints.MaxNorm(0.5)),
            lib.layers.Dense(3, kernel_constraint="non_neg", bias_constraint=lib.constraints.UnitNorm(axis=0)),
        ]
    )


@pytest.mark.parametrize("jit", [True, False])
def test_constrained_dense_layers_train_as_on_keras(jit):
    ours, theirs = _model(tp), _model(keras)
    theirs.set_weights(ours.get_weights())
    ours.compile(tp.optimizers.SGD(0.1), "mse", jit=jit)
    theirs.compile(keras.optimizers.SGD(0.1), "mse")
    ours.fit(X, Y, batch_size=8, epochs=2, shuffle=False, verbose=0)
    theirs.fit(X, Y, batch_size=8, epochs=2, shuffle=False, verbose=0)
    for a, b in zip(ours.get_weights(), theirs.get_weights(), strict=True):
        np.testing.assert_allclose(a, b, rtol=1e-4, atol=1e-5)
    kernel = ours.layers[1].kernel.numpy()
    assert (kernel >= 0).all()
    assert np.linalg.norm(ours.layers[0].kernel.numpy(), axis=0).max() <= 0.5 + 1e-6


def test_constraints_round_trip_through_configs_and_files(tmp_path):
    layers = [
        tp.layers.Dense(2, kernel_constraint="max_norm", bias_constraint=tp.constraints.NonNeg()),
        tp.layers.Embedding(5, 2, embeddings_constraint=tp.constraints.UnitNorm()),
        tp.layers.LSTM(2, kernel_constraint="non_neg", recurrent_constraint=tp.constraints.MaxNorm(2.0)),
    ]
    for layer in layers:
        clone = type(layer).from_config(layer.get_config())
        assert clone.get_config() == layer.get_config()
    model = tp.Sequential([tp.Input((3,)), layers[0]])
    path = str(tmp_path / "m.keras")
    model.save(path)
    loaded = tp.models.load_model(path)
    assert type(loaded.layers[0].kernel.constraint).__name__ == "MaxNorm"
    assert type(loaded.layers[0].bias.constraint).__name__ == "NonNeg"


def test_an_unknown_constraint_is_refused_when_the_layer_is_made():
    with pytest.raises(ValueError, match="kernel_constraint"):
        tp.layers.Dense(2, kernel_constraint="no_such_constraint")


@pytest.mark.parametrize("jit", [True, False])
def test_activity_regularizers_add_the_per_example_penalty_as_on_keras(jit):
    def build(lib):
        return lib.Sequential(
            [
                lib.Input((4,)),
                lib.layers.Dense(5, activity_regularizer="l2"),
                lib.layers.Dense(3, activity_regularizer=lib.regularizers.L1(0.1)),
            ]
        )

    ours, theirs = build(tp), build(keras)
    theirs.set_weights(ours.get_weights())
    ours(tp.tensor(X[:8]))
    theirs(X[:8])
    np.testing.assert_allclose([float(v) for v in ours.losses], [float(v) for v in theirs.losses], rtol=1e-5)
    ours.compile(tp.optimizers.SGD(0.05), "mse", jit=jit)
    theirs.compile(keras.optimizers.SGD(0.05), "mse")
    ours_loss = ours.fit(X, Y, batch_size=8, epochs=2, shuffle=False, verbose=0).history["loss"]
    theirs_loss = theirs.fit(X, Y, batch_size=8, epochs=2, shuffle=False, verbose=0).history["loss"]
    np.testing.assert_allclose(ours_loss, theirs_loss, rtol=1e-4)
    for a, b in zip(ours.get_weights(), theirs.get_weights(), strict=True):
        np.testing.assert_allclose(a, b, rtol=1e-4, atol=1e-5)
    config = ours.layers[0].get_config()
    assert config["activity_regularizer"]["class_name"] == "L2"
    assert tp.layers.Dense.from_config(config).activity_regularizer is not None
