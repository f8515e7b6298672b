# Exercises keras.io guide "Customizing what happens in fit()" (the loss through an overridden compute_loss).
import json

import numpy as np

import tapeflow as keras
from tapeflow import ops


class RegularizedModel(keras.Model):
    """Adds a penalty on the predictions' magnitude to the compiled loss."""

    def compute_loss(self, x=None, y=None, y_pred=None, sample_weight=None, training=True):
        loss = super().compute_loss(x=x, y=y, y_pred=y_pred, sample_weight=sample_weight, training=training)
        return loss + 1e-3 * ops.mean(ops.square(y_pred))


inputs = keras.Input(shape=(16,))
x = keras.layers.Dense(16, activation="relu")(inputs)
outputs = keras.layers.Dense(1)(x)
model = RegularizedModel(inputs, outputs)
model.compile(optimizer="adam", loss="mse")

rng = np.random.default_rng(0)
x_train = rng.random((256, 16)).astype("float32")
y_train = x_train[:, :4].sum(axis=1, keepdims=True)
history = model.fit(x_train, y_train, batch_size=32, epochs=3, verbose=0)

# The reported loss includes the penalty: it exceeds the plain mean squared error.
y_pred = model.predict(x_train, verbose=0)
plain = float(np.mean((y_pred - y_train) ** 2))
evaluated = model.evaluate(x_train, y_train, verbose=0)
assert evaluated > plain, (evaluated, plain)
print("KERAS_SCRIPT_RESULT", json.dumps({"losses": [float(v) for v in history.history["loss"]]}))
