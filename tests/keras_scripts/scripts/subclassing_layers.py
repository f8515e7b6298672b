# Exercises keras.io guide "Making new layers and models via subclassing" (weights, build, nesting, config).
import json

import numpy as np

import tapeflow as keras
from tapeflow import ops


class Linear(keras.layers.Layer):
    def __init__(self, units=32, **kwargs):
        super().__init__(**kwargs)
        self.units = units

    def build(self, input_shape):
        self.w = self.add_weight(shape=(input_shape[-1], self.units), initializer="random_normal", trainable=True)
        self.b = self.add_weight(shape=(self.units,), initializer="zeros", trainable=True)

    def call(self, inputs):
        return ops.matmul(inputs, self.w) + self.b

    def get_config(self):
        config = super().get_config()
        config.update({"units": self.units})
        return config


class ComputeSum(keras.layers.Layer):
    def __init__(self, input_dim):
        super().__init__()
        self.total = self.add_weight(initializer="zeros", shape=(input_dim,), trainable=False)

    def call(self, inputs):
        self.total.assign_add(ops.sum(inputs, axis=0))
        return self.total


class CustomDropout(keras.layers.Layer):
    def __init__(self, rate, **kwargs):
        super().__init__(**kwargs)
        self.rate = rate
        self.seed_generator = keras.random.SeedGenerator(1337)

    def call(self, inputs, training=None):
        if training:
            return keras.random.dropout(inputs, rate=self.rate, seed=self.seed_generator)
        return inputs


class MLPBlock(keras.layers.Layer):
    def __init__(self):
        super().__init__()
        self.linear_1 = Linear(32)
        self.linear_2 = Linear(16)
        self.dropout = CustomDropout(0.1)
        self.linear_3 = Linear(1)

    def call(self, inputs, training=None):
        x = keras.activations.relu(self.linear_1(inputs))
        x = keras.activations.relu(self.linear_2(x))
        x = self.dropout(x, training=training)
        return self.linear_3(x)


x = ops.ones((2, 2))
my_sum = ComputeSum(2)
my_sum(x)
assert np.allclose(ops.convert_to_numpy(my_sum(x)), [4.0, 4.0])
assert len(my_sum.weights) == 1 and len(my_sum.trainable_weights) == 0

mlp = MLPBlock()
y = mlp(ops.ones(shape=(3, 64)))
assert len(mlp.weights) == 6 and len(mlp.trainable_weights) == 6

layer = Linear(64)
config = layer.get_config()
new_layer = Linear.from_config(config)
assert new_layer.units == 64

inputs = keras.Input(shape=(8,))
outputs = MLPBlock()(inputs)
model = keras.Model(inputs, outputs)
rng = np.random.default_rng(0)
x_train = rng.random((256, 8)).astype("float32")
y_train = x_train[:, :3].sum(axis=1, keepdims=True)
model.compile(optimizer="adam", loss="mse")
history = model.fit(x_train, y_train, batch_size=32, epochs=3, verbose=0)
print("KERAS_SCRIPT_RESULT", json.dumps({"losses": [float(v) for v in history.history["loss"]]}))
