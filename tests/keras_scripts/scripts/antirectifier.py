# Exercises keras.io example "Simple custom layer example: Antirectifier".
import json

import numpy as np

import tapeflow as keras
from tapeflow import layers, ops


class Antirectifier(layers.Layer):
    def __init__(self, initializer="he_normal", **kwargs):
        super().__init__(**kwargs)
        self.initializer = keras.initializers.get(initializer)

    def build(self, input_shape):
        output_dim = input_shape[-1]
        self.kernel = self.add_weight(
            shape=(output_dim * 2, output_dim), initializer=self.initializer, name="kernel", trainable=True
        )

    def call(self, inputs):
        inputs -= ops.mean(inputs, axis=-1, keepdims=True)
        pos = ops.relu(inputs)
        neg = ops.relu(-inputs)
        concatenated = ops.concatenate([pos, neg], axis=-1)
        return ops.matmul(concatenated, self.kernel)

    def get_config(self):
        base_config = super().get_config()
        config = {"initializer": keras.initializers.serialize(self.initializer)}
        return dict(list(base_config.items()) + list(config.items()))


rng = np.random.default_rng(0)
y_train = rng.integers(0, 10, 512)
x_train = rng.normal(0, 0.3, (512, 784)).astype("float32")
x_train[np.arange(512), y_train * 70] += 3.0

model = keras.Sequential(
    [
        keras.Input(shape=(784,)),
        layers.Dense(64),
        Antirectifier(),
        layers.Dense(64),
        Antirectifier(),
        layers.Dropout(0.5),
        layers.Dense(10),
    ]
)
model.compile(
    loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True),
    optimizer=keras.optimizers.RMSprop(),
    metrics=[keras.metrics.SparseCategoricalAccuracy()],
)
history = model.fit(x_train, y_train, batch_size=128, epochs=3, validation_split=0.15, verbose=0)
model.evaluate(x_train[:64], y_train[:64], verbose=0)
config = model.layers[1].get_config()
assert Antirectifier.from_config(config).get_config()["initializer"] == config["initializer"]
print("KERAS_SCRIPT_RESULT", json.dumps({"losses": [float(v) for v in history.history["loss"]]}))
