# Exercises keras.io guide "Understanding masking & padding".
import json

import numpy as np

import tapeflow as keras
from tapeflow import layers, ops

raw_inputs = [[711, 632, 71], [73, 8, 3215, 55, 927], [83, 91, 1, 645, 1253, 927]]
padded_inputs = keras.utils.pad_sequences(raw_inputs, padding="post")
assert padded_inputs.shape == (3, 6)

embedding = layers.Embedding(input_dim=5000, output_dim=16, mask_zero=True)
masked_output = embedding(padded_inputs)
expected = padded_inputs != 0
computed = ops.convert_to_numpy(embedding.compute_mask(padded_inputs))
assert (computed == expected).all()

masking_layer = layers.Masking()
unmasked_embedding = ops.cast(ops.tile(ops.expand_dims(padded_inputs, axis=-1), [1, 1, 10]), "float32")
masked_embedding = masking_layer(unmasked_embedding)


class TemporalSoftmax(keras.layers.Layer):
    """A softmax over time that ignores masked steps."""

    def __init__(self, **kwargs):
        super().__init__(**kwargs)
        self.supports_masking = True

    def call(self, inputs, mask=None):
        assert mask is not None
        broadcast_float_mask = ops.expand_dims(ops.cast(mask, "float32"), -1)
        inputs_exp = ops.exp(inputs) * broadcast_float_mask
        inputs_sum = ops.sum(inputs_exp * broadcast_float_mask, axis=-1, keepdims=True)
        return inputs_exp / inputs_sum


# A mask-consuming model: Embedding(mask_zero) -> LSTM, trained on padded sequences.
inputs = keras.Input(shape=(None,), dtype="int32")
x = layers.Embedding(input_dim=50, output_dim=8, mask_zero=True)(inputs)
x = layers.LSTM(16)(x)
outputs = layers.Dense(1, activation="sigmoid")(x)
model = keras.Model(inputs, outputs)

rng = np.random.default_rng(0)
lengths = rng.integers(2, 8, 128)
sequences = [list(rng.integers(1, 50, n)) for n in lengths]
x_train = keras.utils.pad_sequences(sequences, maxlen=8, padding="post")
y_train = (x_train[:, 0] < 25).astype("float32")
model.compile(optimizer=keras.optimizers.Adam(1e-2), loss="binary_crossentropy")
history = model.fit(x_train, y_train, batch_size=32, epochs=3, verbose=0)

# Padding after the end does not change the prediction.
longer = np.concatenate([x_train[:4], np.zeros((4, 3), "int32")], axis=1)
np.testing.assert_allclose(
    model.predict(x_train[:4], verbose=0), model.predict(longer, verbose=0), rtol=1e-4, atol=1e-5
)

# The masked softmax consumes the mask the Embedding produces.
inputs = keras.Input(shape=(None,), dtype="int32")
x = layers.Embedding(input_dim=10, output_dim=32, mask_zero=True)(inputs)
x = layers.Dense(1)(x)
outputs = TemporalSoftmax()(x)
softmax_model = keras.Model(inputs, outputs)
y = softmax_model(np.array([[1, 2, 3, 0, 0]], "int32"))
print("KERAS_SCRIPT_RESULT", json.dumps({"losses": [float(v) for v in history.history["loss"]]}))
