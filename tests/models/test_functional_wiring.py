"""The functional API wires every argument of a layer call, ops on symbolic tensors and masks
as Keras 3 does: each model here is built in both, with the same weights, and must give the
same outputs (and gradients), also after a save and load."""

import json
import os

os.environ.setdefault("KERAS_BACKEND", "torch")

import keras  # noqa: E402
import numpy as np  # noqa: E402
import pytest  # noqa: E402
import torch  # noqa: E402

import tapeflow as tp  # noqa: E402

RNG = np.random.default_rng(7)


def _random(*shape):
    return RNG.standard_normal(shape).astype("float32")


def _roundtrip(model, tmp_path, *inputs):
    """The model's predictions, the same after save/load and after get_config/from_config."""
    expected = model.predict(*inputs, verbose=0)
    path = str(tmp_path / "m.keras")
    model.save(path)
    loaded = tp.models.load_model(path)
    again = tp.Model.from_config(json.loads(json.dumps(model.get_config())))
    again.set_weights(model.get_weights())
    for other in (loaded, again):
        got = other.predict(*inputs, verbose=0)
        for a, b in zip(tp.tree.flatten(got), tp.tree.flatten(expected), strict=True):
            np.testing.assert_allclose(a, b, rtol=1e-6, atol=1e-6)
    return expected


# ---------------------------------------------------------------- custom layers in both libraries
@tp.saving.register_serializable(package="wiring_test")
class TpPair(tp.layers.Layer):
    def call(self, a, b):
        return a - 10.0 * b


class KerasPair(keras.layers.Layer):
    def call(self, a, b):
        return a - 10.0 * b


def _tp_attend(layer, query, value, key, attention_mask):
    scores = tp.matmul(tp.matmul(query, layer.w), tp.transpose(key, (0, 2, 1)))
    scores = scores + (1.0 - tp.cast(attention_mask, "float32")) * -1e9
    return tp.matmul(tp.nn.softmax(scores, axis=-1), value)


@tp.saving.register_serializable(package="wiring_test")
class TpAttend(tp.layers.Layer):
    def build(self, query_shape):
        self.w = self.add_weight("w", (query_shape[-1], query_shape[-1]))

    def call(self, query, value, key=None, attention_mask=None):
        return _tp_attend(self, query, value, key, attention_mask)


class KerasAttend(keras.layers.Layer):
    def build(self, query_shape, value_shape=None, key_shape=None, attention_mask_shape=None):
        self.w = self.add_weight(shape=(query_shape[-1], query_shape[-1]), name="w")

    def call(self, query, value, key=None, attention_mask=None):
        scores = keras.ops.matmul(keras.ops.matmul(query, self.w), keras.ops.transpose(key, (0, 2, 1)))
        scores = scores + (1.0 - keras.ops.cast(attention_mask, "float32")) * -1e9
        return keras.ops.matmul(keras.ops.softmax(scores, axis=-1), value)


# ---------------------------------------------------------------------------------------- tests
def test_a_second_positional_tensor_is_wired_not_dropped(tmp_path):
    a_in, b_in = tp.Input((3,)), tp.Input((3,))
    model = tp.Model([a_in, b_in], TpPair()(a_in, b_in))
    ka, kb = keras.Input((3,)), keras.Input((3,))
    reference = keras.Model([ka, kb], KerasPair()(ka, kb))
    a, b = _random(4, 3), _random(4, 3)
    got = _roundtrip(model, tmp_path, [a, b])
    np.testing.assert_allclose(got, reference.predict([a, b], verbose=0), rtol=1e-6)
    np.testing.assert_allclose(got, a - 10 * b, rtol=1e-6)


def test_keyword_tensors_and_masks_of_a_custom_layer_match_keras(tmp_path):
    q, v, k = tp.Input((4, 3)), tp.Input((5, 2)), tp.Input((5, 3))
    m = tp.Input((4, 5))
    layer = TpAttend()
    model = tp.Model([q, v, k, m], layer(q, v, key=k, attention_mask=m))
    kq, kv, kk, km = keras.Input((4, 3)), keras.Input((5, 2)), keras.Input((5, 3)), keras.Input((4, 5))
    reference = keras.Model([kq, kv, kk, km], KerasAttend()(kq, kv, key=kk, attention_mask=km))
    reference.set_weights(model.get_weights())
    data = [_random(2, 4, 3), _random(2, 5, 2), _random(2, 5, 3), (RNG.random((2, 4, 5)) > 0.3).astype("float32")]
    got = _roundtrip(model, tmp_path, data)
    np.testing.assert_allclose(got, reference.predict(data, verbose=0), rtol=1e-5, atol=1e-6)
    config = model.get_config()["calls"]
    assert sorted(config[-1]["call_kwargs"]) == ["attention_mask", "key"]


def test_lstm_initial_state_matches_keras(tmp_path):
    x, h, c = tp.Input((5, 3)), tp.Input((4,)), tp.Input((4,))
    model = tp.Model([x, h, c], tp.layers.LSTM(4, return_sequences=True)(x, initial_state=[h, c]))
    kx, kh, kc = keras.Input((5, 3)), keras.Input((4,)), keras.Input((4,))
    reference = keras.Model([kx, kh, kc], keras.layers.LSTM(4, return_sequences=True)(kx, initial_state=[kh, kc]))
    reference.set_weights(model.get_weights())
    data = [_random(2, 5, 3), _random(2, 4), _random(2, 4)]
    got = _roundtrip(model, tmp_path, data)
    np.testing.assert_allclose(got, reference.predict(data, verbose=0), rtol=1e-5, atol=1e-6)
    frozen = model.freeze()
    np.testing.assert_allclose(frozen(*data).numpy(), got, rtol=1e-5, atol=1e-6)


def test_non_tensor_arguments_and_the_first_argument_by_keyword_are_kept(tmp_path):
    x = tp.Input((5, 3))
    out, h, c = tp.layers.LSTM(2, return_state=True)(inputs=x)
    dropped = tp.layers.Dropout(0.5)(out, training=False)
    model = tp.Model(x, [dropped, h, c])
    config = model.get_config()["calls"]
    assert config[-1]["call_kwargs"] == {"training": False}
    _roundtrip(model, tmp_path, _random(2, 5, 3))


def test_slicing_arithmetic_and_ops_on_inputs_match_keras(tmp_path):
    x = tp.Input((6,))
    y = tp.nn.relu(tp.concat([x[:, ::-1], 2.0 * x - 1.0, x / 4.0], axis=1))
    y = tp.layers.Dense(3, name="head")(tp.reshape(y, (-1, 3, 6))[:, 1])
    model = tp.Model(x, tp.exp(-y) + y**2)
    kx = keras.Input((6,))
    ky = keras.ops.relu(keras.ops.concatenate([keras.ops.flip(kx, axis=1), 2.0 * kx - 1.0, kx / 4.0], axis=1))
    ky = keras.layers.Dense(3)(keras.ops.reshape(ky, (-1, 3, 6))[:, 1])
    reference = keras.Model(kx, keras.ops.exp(-ky) + ky**2)
    reference.set_weights(model.get_weights())
    data = _random(5, 6)
    got = _roundtrip(model, tmp_path, data)
    np.testing.assert_allclose(got, reference.predict(data, verbose=0), rtol=1e-5, atol=1e-6)
    assert [layer.name for layer in model.layers if not isinstance(layer, tp.layers.InputLayer)] == ["head"]
    np.testing.assert_allclose(model.freeze()(data).numpy(), got, rtol=1e-5, atol=1e-6)


def _gradients_tp(model, data):
    with tp.GradientTape() as tape:
        loss = tp.sum(model(data, training=True) ** 2)
    return [g.numpy() for g in tape.gradient(loss, model.trainable_weights)]


def _gradients_keras(model, data):
    out = model(torch.tensor(data), training=True)
    (out**2).sum().backward()
    return [w.value.grad.detach().numpy() for w in model.trainable_weights]


@pytest.mark.parametrize("rnn", ["LSTM", "GRU", "SimpleRNN"])
def test_embedding_mask_zero_reaches_the_rnn_as_in_keras(rnn, tmp_path):
    ids = np.array([[3, 1, 4, 0, 0], [2, 7, 0, 0, 0], [5, 9, 2, 6, 8]], "int64")
    x = tp.Input((5,), dtype="int64")
    hidden = tp.layers.Dense(3)(tp.layers.Embedding(10, 4, mask_zero=True)(x))
    model = tp.Model(x, getattr(tp.layers, rnn)(3)(hidden))
    kx = keras.Input((5,), dtype="int64")
    khidden = keras.layers.Dense(3)(keras.layers.Embedding(10, 4, mask_zero=True)(kx))
    reference = keras.Model(kx, getattr(keras.layers, rnn)(3)(khidden))
    reference.set_weights(model.get_weights())
    got = _roundtrip(model, tmp_path, ids)
    np.testing.assert_allclose(got, reference.predict(ids, verbose=0), rtol=1e-5, atol=1e-6)
    for mine, theirs in zip(_gradients_tp(model, ids), _gradients_keras(reference, ids), strict=True):
        np.testing.assert_allclose(mine, theirs, rtol=1e-4, atol=1e-6)


def test_masking_layer_matches_keras_and_skips_padded_steps(tmp_path):
    data = _random(3, 4, 2)
    data[0, 2:] = 0.0
    data[1, 1:] = 0.0
    x = tp.Input((4, 2))
    model = tp.Model(x, tp.layers.LSTM(3, return_sequences=True)(tp.layers.Masking()(x)))
    kx = keras.Input((4, 2))
    reference = keras.Model(kx, keras.layers.LSTM(3, return_sequences=True)(keras.layers.Masking()(kx)))
    reference.set_weights(model.get_weights())
    got = _roundtrip(model, tmp_path, data)
    np.testing.assert_allclose(got, reference.predict(data, verbose=0), rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(got[0, 2:], np.repeat(got[0, 1:2], 2, axis=0), rtol=1e-6)
    for mine, theirs in zip(_gradients_tp(model, data), _gradients_keras(reference, data), strict=True):
        np.testing.assert_allclose(mine, theirs, rtol=1e-4, atol=1e-6)
    assert tp.layers.Masking(mask_value=-1.0).get_config()["mask_value"] == -1.0
    with pytest.raises(TypeError, match="mask_value"):
        tp.layers.Masking(mask_value="pad")


def test_training_reaches_nested_models_and_layers():
    inner_in = tp.Input((50,))
    inner = tp.Model(inner_in, tp.layers.Dropout(0.5)(inner_in))
    x = tp.Input((50,))
    model = tp.Model(x, inner(x) + 0.0)
    data = np.ones((4, 50), "float32")
    np.testing.assert_array_equal(model(data, training=False).numpy(), data)
    dropped = model(data, training=True).numpy()
    assert set(np.unique(dropped)) == {0.0, 2.0}


def test_configs_written_before_every_argument_was_recorded_still_load():
    x = tp.Input((3,))
    model = tp.Model(x, tp.layers.Dense(2)(x))
    config = model.get_config()
    old = dict(config, calls=[{"layer": c["layer"], "args": {"input": 0}, "kwargs": {}} for c in config["calls"]])
    again = tp.Model.from_config(old)
    again.set_weights(model.get_weights())
    data = _random(2, 3)
    np.testing.assert_allclose(again.predict(data, verbose=0), model.predict(data, verbose=0), rtol=1e-6)


def test_what_a_config_cannot_hold_is_refused_by_name():
    x = tp.Input((3,))
    weight = tp.Variable(np.ones(3, "float32"), name="scale")
    with pytest.raises(ValueError, match="Variable 'scale'"):
        tp.Model(x, x * weight).get_config()
    with pytest.raises(ValueError, match="cannot be stored in a model config"):
        tp.Model(x, x + tp.ones((300, 3))).get_config()
    with pytest.raises(TypeError, match="symbolic tensor"):
        float(tp.Input((1,)))
    with pytest.raises(TypeError, match="called without inputs"):
        tp.layers.Dense(2)()
