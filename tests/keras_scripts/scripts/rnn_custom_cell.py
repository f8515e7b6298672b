# Exercises keras.io API docs "RNN layer" (a minimal RNN cell written with add_weight, wrapped in keras.layers.RNN).
import json

import numpy as np

import tapeflow as keras
from tapeflow import layers, ops


class MinimalRNNCell(layers.Layer):
    def __init__(self, units, **kwargs):
        super().__init__(**kwargs)
        self.units = units
        self.state_size = units

    def build(self, input_shape):
        self.kernel = self.add_weight(shape=(input_shape[-1], self.units), initializer="uniform", name="kernel")
        self.recurrent_kernel = self.add_weight(
            shape=(self.units, self.units), initializer="uniform", name="recurrent_kernel"
        )

    def call(self, inputs, states):
        prev_output = states[0]
        h = ops.matmul(inputs, self.kernel)
        output = h + ops.matmul(prev_output, self.recurrent_kernel)
        return output, [output]


cell = MinimalRNNCell(16)
x = keras.Input((None, 5))
y = layers.RNN(cell)(x)
outputs = layers.Dense(1)(y)
model = keras.Model(x, outputs)

cells = [MinimalRNNCell(8), MinimalRNNCell(8)]
stacked = layers.RNN(cells, return_sequences=True)(x)
assert tuple(stacked.shape) == (None, None, 8)

rng = np.random.default_rng(0)
x_train = rng.normal(0, 0.5, (128, 5, 5)).astype("float32")
y_train = x_train[:, :, 0].sum(axis=1, keepdims=True)
model.compile(optimizer=keras.optimizers.Adam(1e-2), loss="mse")
history = model.fit(x_train, y_train, batch_size=32, epochs=3, verbose=0)
print("KERAS_SCRIPT_RESULT", json.dumps({"losses": [float(v) for v in history.history["loss"]]}))
