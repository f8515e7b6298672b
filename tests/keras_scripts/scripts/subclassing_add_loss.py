# Exercises keras.io guide "Making new layers and models via subclassing" (the add_loss() method and model.losses).
import json

import numpy as np

import tapeflow as keras
from tapeflow import layers, ops


class ActivityRegularizationLayer(keras.layers.Layer):
    def __init__(self, rate=1e-2):
        super().__init__()
        self.rate = rate

    def call(self, inputs):
        self.add_loss(self.rate * ops.mean(inputs))
        return inputs


class OuterLayer(keras.layers.Layer):
    def __init__(self):
        super().__init__()
        self.activity_reg = ActivityRegularizationLayer(1e-2)

    def call(self, inputs):
        return self.activity_reg(inputs)


class OuterLayerWithKernelRegularizer(keras.layers.Layer):
    def __init__(self):
        super().__init__()
        self.dense = keras.layers.Dense(32, kernel_regularizer=keras.regularizers.l2(1e-3))

    def call(self, inputs):
        return self.dense(inputs)


layer = OuterLayer()
assert len(layer.losses) == 0
_ = layer(ops.zeros((1, 1)))
assert len(layer.losses) == 1
_ = layer(ops.zeros((1, 1)))
assert len(layer.losses) == 1  # losses are reset at the start of each call

layer = OuterLayerWithKernelRegularizer()
_ = layer(ops.zeros((1, 1)))
assert len(layer.losses) == 1

inputs = keras.Input(shape=(3,))
outputs = ActivityRegularizationLayer()(inputs)
model = keras.Model(inputs, outputs)
model.compile(optimizer="adam", loss="mse")
rng = np.random.default_rng(0)
x = rng.random((64, 3)).astype("float32")
y = rng.random((64, 3)).astype("float32")
model.fit(x, y, verbose=0)

# With only add_loss() losses, compile() needs no loss.
inputs = keras.Input(shape=(3,))
hidden = layers.Dense(8)(inputs)
outputs = ActivityRegularizationLayer(1.0)(layers.Dense(1)(hidden))
model = keras.Model(inputs, outputs)
model.compile(optimizer=keras.optimizers.SGD(0.1))
history = model.fit(x, epochs=3, batch_size=16, verbose=0)
print("KERAS_SCRIPT_RESULT", json.dumps({"losses": [float(v) for v in history.history["loss"]]}))
