"""`tp.activations` against `keras.activations` (torch backend): values and gradients on the
same inputs, names, and Keras's serialize/deserialize of initializers and regularizers."""

import numpy as np
import pytest

import tapeflow as tp

keras = pytest.importorskip("keras")
torch = pytest.importorskip("torch")

NAMES = [
    "relu",
    "sigmoid",
    "softmax",
    "tanh",
    "gelu",
    "elu",
    "selu",
    "softplus",
    "softsign",
    "swish",
    "silu",
    "linear",
    "exponential",
    "leaky_relu",
    "relu6",
    "hard_sigmoid",
]
VARIANTS = [
    ("relu", {"negative_slope": 0.3}),
    ("relu", {"max_value": 1.0}),
    ("relu", {"threshold": 0.5}),
    ("relu", {"negative_slope": 0.2, "max_value": 6.0, "threshold": -0.4}),
    ("leaky_relu", {"negative_slope": 0.05}),
    ("elu", {"alpha": 0.5}),
    ("gelu", {"approximate": True}),
    ("softmax", {"axis": 0}),
]


def assert_matches_keras(name, kwargs):
    x = (np.random.default_rng(0).standard_normal((3, 5)) * 4).astype("float32")
    cot = np.random.default_rng(1).standard_normal((3, 5)).astype("float32")
    xt = tp.tensor(x)
    with tp.GradientTape() as tape:
        tape.watch(xt)
        y = getattr(tp.activations, name)(xt, **kwargs)
    g = tape.gradient(y, xt, output_gradients=tp.tensor(cot))
    xk = torch.tensor(x, requires_grad=True)
    yk = getattr(keras.activations, name)(xk, **kwargs)
    yk.backward(torch.tensor(cot))
    np.testing.assert_allclose(y.numpy(), yk.detach().numpy(), rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(g.numpy(), xk.grad.numpy(), rtol=1e-4, atol=1e-5)


@pytest.mark.parametrize("name", NAMES)
def test_activation_matches_keras(name):
    assert_matches_keras(name, {})


@pytest.mark.parametrize(("name", "kwargs"), VARIANTS, ids=[f"{n}-{k}" for n, k in VARIANTS])
def test_activation_arguments_match_keras(name, kwargs):
    assert_matches_keras(name, kwargs)


@pytest.mark.parametrize("name", NAMES)
def test_get_serialize_deserialize_round_trip_like_keras(name):
    fn = tp.activations.get(name)
    assert tp.activations.serialize(fn) == keras.activations.serialize(keras.activations.get(name))
    assert tp.activations.deserialize(tp.activations.serialize(fn)) is fn
    assert tp.activations.get(fn) is fn


def test_get_none_is_linear_and_bad_input_is_named():
    assert tp.activations.get(None) is tp.activations.linear
    assert tp.activations.get({"class_name": "function", "config": "relu"}) is tp.activations.relu
    with pytest.raises(ValueError, match="unknown activation 'swishy'"):
        tp.activations.get("swishy")
    with pytest.raises(TypeError, match="activations.get: expected a name or a callable, got 3"):
        tp.activations.get(3)
    with pytest.raises(ValueError, match="activations.serialize"):
        tp.activations.serialize(lambda x: x)


def test_registered_activation_round_trips():
    @tp.saving.register_serializable(package="ActTest")
    def doubled(x):
        return 2.0 * x

    name = tp.activations.serialize(doubled)
    assert tp.activations.deserialize(name) is doubled


def test_layers_resolve_names_through_activations():
    layer = tp.layers.Dense(2, activation="swish")
    assert layer.activation is tp.activations.silu
    assert layer.get_config()["activation"] == "silu"
    dense = tp.layers.Dense(2, activation=tp.activations.hard_sigmoid)
    assert dense.get_config()["activation"] == "hard_sigmoid"
    assert tp.layers.Dense.from_config(dense.get_config()).activation is tp.activations.hard_sigmoid


def test_mixed_precision_softmax_stays_float32():
    assert tp.activations.softmax(tp.zeros((1, 2), dtype="float16")).dtype == tp.float32


# ------------------------------------------------------- initializers, regularizers
@pytest.mark.parametrize("name", ["HeNormal", "GlorotUniform", "Zeros", "Constant", "RandomNormal"])
def test_initializers_serialize_like_keras(name):
    ours = getattr(tp.initializers, name)()
    config = tp.initializers.serialize(ours)
    theirs = keras.initializers.serialize(getattr(keras.initializers, name)())
    assert config["class_name"] == theirs["class_name"]
    assert set(config["config"]) <= set(theirs["config"])
    back = tp.initializers.deserialize(config)
    assert type(back) is type(ours) and back.get_config() == ours.get_config()
    assert tp.initializers.serialize(None) is None and tp.initializers.serialize("zeros") == "zeros"
    assert isinstance(tp.initializers.deserialize("he_normal"), tp.initializers.HeNormal)


def test_initializers_serialize_refuses_an_unregistered_function():
    with pytest.raises(ValueError, match="initializers.serialize"):
        tp.initializers.serialize(lambda shape, dtype=None: None)
    with pytest.raises(TypeError, match="initializers.deserialize: expected a config dict or a name, got 3"):
        tp.initializers.deserialize(3)


@pytest.mark.parametrize(
    ("name", "kwargs"), [("l1", {"l1": 0.1}), ("l2", {"l2": 0.2}), ("l1_l2", {"l1": 0.1, "l2": 0.3})]
)
def test_regularizer_aliases_match_keras(name, kwargs):
    w = np.random.default_rng(0).standard_normal((3, 4)).astype("float32")
    ours = getattr(tp.regularizers, name)(**kwargs)
    theirs = getattr(keras.regularizers, name)(**kwargs)
    np.testing.assert_allclose(float(ours(tp.tensor(w))), float(theirs(torch.tensor(w))), rtol=1e-5)
    config = tp.regularizers.serialize(ours)
    assert config["class_name"] == keras.regularizers.serialize(theirs)["class_name"]
    keras_config = keras.regularizers.serialize(theirs)["config"]
    assert config["config"] == pytest.approx({k: v for k, v in keras_config.items() if k in config["config"]})
    assert tp.regularizers.deserialize(config).get_config() == ours.get_config()
    assert tp.regularizers.l2 is tp.regularizers.L2
