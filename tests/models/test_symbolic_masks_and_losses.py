"""Masks while a functional model is defined and in Sequential, and losses on symbolic
tensors, against Keras 3."""

import os

os.environ.setdefault("KERAS_BACKEND", "torch")

import keras  # noqa: E402
import numpy as np  # noqa: E402
import pytest  # noqa: E402

import tapeflow as tp  # noqa: E402

DATA = np.array([[1, 2, 3, 0, 0], [4, 0, 0, 0, 0]], "int32")


class TpMasked(tp.layers.Layer):
    def call(self, inputs, mask=None):
        if mask is None:
            raise AssertionError("no mask reached call")
        return inputs * tp.ops.expand_dims(tp.ops.cast(mask, "float32"), -1)


class KerasMasked(keras.layers.Layer):
    def call(self, inputs, mask=None):
        return inputs * keras.ops.expand_dims(keras.ops.cast(mask, "float32"), -1)


def test_the_embedding_mask_reaches_a_custom_layer_while_defined():
    x = tp.Input((None,), dtype="int32")
    y = tp.layers.Embedding(10, 4, mask_zero=True)(x)
    assert tuple(y._keras_mask.shape) == (None, None)
    model = tp.Model(x, TpMasked()(tp.layers.Dense(3)(y)))
    kx = keras.Input((None,), dtype="int32")
    reference = keras.Model(kx, KerasMasked()(keras.layers.Dense(3)(keras.layers.Embedding(10, 4, mask_zero=True)(kx))))
    reference.set_weights(model.get_weights())
    np.testing.assert_allclose(model(DATA).numpy(), keras.ops.convert_to_numpy(reference(DATA)), rtol=1e-5)


@pytest.mark.parametrize("declared_input", [True, False])
def test_masks_travel_in_sequential(declared_input):
    head = [tp.Input((None,), dtype="int32")] if declared_input else []
    khead = [keras.Input((None,), dtype="int32")] if declared_input else []
    model = tp.Sequential([*head, tp.layers.Embedding(10, 4, mask_zero=True), tp.layers.Dense(3), TpMasked()])
    reference = keras.Sequential(
        [*khead, keras.layers.Embedding(10, 4, mask_zero=True), keras.layers.Dense(3), KerasMasked()]
    )
    model(DATA), reference(DATA)
    reference.set_weights(model.get_weights())
    np.testing.assert_allclose(model(DATA).numpy(), keras.ops.convert_to_numpy(reference(DATA)), rtol=1e-5)


@pytest.mark.parametrize("reduction", ["sum_over_batch_size", "sum", "mean_with_sample_weight"])
def test_a_loss_with_sample_weight_on_symbolic_tensors(rng, reduction):
    targets, logits, weights = tp.Input((1,)), tp.Input((1,)), tp.Input((1,))
    loss = tp.losses.BinaryCrossentropy(from_logits=True, reduction=reduction)(targets, logits, weights)
    assert loss.shape == ()
    model = tp.Model([targets, logits, weights], loss)
    data = [rng.integers(0, 2, (6, 1)).astype("float32"), rng.normal(size=(6, 1)), rng.uniform(size=(6, 1))]
    data = [d.astype("float32") for d in data]
    expected = keras.losses.BinaryCrossentropy(from_logits=True, reduction=reduction)(*data)
    np.testing.assert_allclose(model(data).numpy(), keras.ops.convert_to_numpy(expected), rtol=1e-5)
