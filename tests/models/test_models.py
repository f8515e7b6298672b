"""Building models as Keras 3 does: `tp.Input` in a Sequential (or an InputLayer, or
`input_shape=` on the first layer) builds it at construction; a functional model is built
at construction; subclassed models' configs are their constructor arguments."""

from __future__ import annotations

import numpy as np
import pytest

import tapeflow as tp

L = tp.layers


def _reference_dense(x, kernel, bias, relu=False):
    y = x.astype(np.float64) @ kernel.astype(np.float64) + bias
    return np.maximum(y, 0.0) if relu else y


def test_input_is_the_top_level_alias_and_returns_the_input_layers_output():
    x = tp.Input((784,), name="pixels")
    assert x.shape == (None, 784) and x.name == "pixels"
    assert isinstance(x.input_layer, L.InputLayer) and x.input_layer.output is x
    assert tp.Input is L.Input
    assert L.Input(batch_shape=(8, 3)).shape == (8, 3)
    with pytest.raises(ValueError, match="exactly one of shape and batch_shape"):
        L.InputLayer()


@pytest.mark.parametrize(
    "make",
    [
        lambda: tp.Sequential([tp.Input((4,)), L.Dense(5, activation="relu"), L.Dense(2)]),
        lambda: tp.Sequential([L.InputLayer(shape=(4,)), L.Dense(5, activation="relu"), L.Dense(2)]),
        lambda: tp.Sequential([L.Dense(5, activation="relu", input_shape=(4,)), L.Dense(2)]),
    ],
    ids=["tp.Input", "InputLayer", "input_shape"],
)
def test_sequential_with_a_declared_input_is_built_at_construction(make):
    model = make()
    assert model.built and [type(layer).__name__ for layer in model.layers] == ["Dense", "Dense"]  # no InputLayer
    weights = model.get_weights()
    assert [w.shape for w in weights] == [(4, 5), (5,), (5, 2), (2,)]
    assert model.count_params() == 4 * 5 + 5 + 5 * 2 + 2
    lines = []
    model.summary(print_fn=lines.append)
    assert "(None, 5)" in lines[0] and "(None, 2)" in lines[0] and "Total params: 37" in lines[0]
    graph = model.freeze()  # before any call
    x = np.random.default_rng(0).normal(size=(3, 4)).astype("float32")
    expected = _reference_dense(_reference_dense(x, *weights[:2], relu=True), *weights[2:])
    np.testing.assert_allclose(graph(tp.tensor(x)).numpy(), expected, rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(model(x).numpy(), expected, rtol=1e-5, atol=1e-6)
    model.trainable = False
    assert model.trainable_weights == []


def test_adding_to_a_built_sequential_builds_the_new_layer():
    model = tp.Sequential([tp.Input((3,))])
    model.add(L.Dense(4))
    assert model.count_params() == 16
    model.add(L.Dense(1))
    assert [w.shape for w in model.get_weights()] == [(3, 4), (4,), (4, 1), (1,)]


def test_an_input_after_a_layer_is_refused():
    model = tp.Sequential([L.Dense(2)])
    with pytest.raises(ValueError, match="only be the first entry"):
        model.add(tp.Input((3,)))
    with pytest.raises(ValueError, match="expected a tp.layers.Layer or a tp.Input"):
        model.add("dense")


def test_sequential_without_an_input_builds_on_its_first_call_or_by_build():
    model = tp.Sequential([L.Dense(3)])
    assert not model.built
    with pytest.raises(ValueError, match="count_params needs a built layer"):
        model.count_params()
    model.build((None, 2))
    assert model.count_params() == 9
    lazy = tp.Sequential([L.Dense(3)])
    lazy(np.ones((5, 2), "float32"))
    assert lazy.get_config()["build_input_shape"] == [None, 2]  # any batch size


def test_integer_inputs_build_an_embedding_at_construction():
    model = tp.Sequential([tp.Input((6,), dtype="int64"), L.Embedding(10, 3), L.Flatten(), L.Dense(1)])
    assert model.count_params() == 30 + 18 + 1
    assert model.freeze().inputs[0].type_string() == "int64[?,6]"


def test_functional_model_is_built_at_construction():
    a, b = tp.Input((3,)), tp.Input((2,))
    h = L.Concatenate()([L.Dense(4)(a), b])
    model = tp.Model([a, b], L.Dense(1)(h))
    assert model.built and model.count_params() == 16 + 7
    lines = []
    model.summary(print_fn=lines.append)
    assert "Total params: 23" in lines[0]
    assert len(model.get_weights()) == 4
    graph = model.freeze()
    x = [np.ones((2, 3), "float32"), np.ones((2, 2), "float32")]
    np.testing.assert_allclose(graph(*map(tp.tensor, x)).numpy(), model(x).numpy(), rtol=1e-6)


class Mlp(tp.Model):
    def __init__(self, width=4, depth=2, **kwargs):
        super().__init__(**kwargs)
        self.hidden = [L.Dense(width, activation="relu") for _ in range(depth)]
        self.out = L.Dense(1)

    def call(self, x):
        for layer in self.hidden:
            x = layer(x)
        return self.out(x)


class Holder(tp.Model):
    def __init__(self, layer):
        super().__init__()
        self.layer = layer

    def call(self, x):
        return self.layer(x)


def test_subclassed_model_config_is_its_plain_constructor_arguments():
    model = Mlp(8, depth=3, name="mlp")
    assert model.get_config() == {"width": 8, "depth": 3, "name": "mlp", "trainable": True, "dtype": "float32"}
    clone = Mlp.from_config(model.get_config())
    clone(np.ones((1, 2), "float32"))
    assert len(clone.hidden) == 3 and clone.hidden[0].units == 8
    with pytest.raises(NotImplementedError, match="layer=.*override get_config"):
        Holder(L.Dense(2)).get_config()


def test_a_sequential_called_on_a_symbolic_input_is_built_with_its_weights(tmp_path):
    inner = tp.Sequential([L.Embedding(10, 4), L.Flatten(), L.Dense(2)])
    ids = tp.Input((3,), dtype="int64")
    model = tp.Model(ids, L.Dense(1)(inner(ids)))
    assert inner.built and model.count_params() == 40 + 26 + 3
    assert inner.get_config()["input_dtype"] == "int64"
    model.save(tmp_path / "m.keras")
    loaded = tp.models.load_model(tmp_path / "m.keras")
    x = np.array([[1, 2, 3], [4, 5, 9]])
    np.testing.assert_array_equal(loaded.predict(x), model.predict(x))
