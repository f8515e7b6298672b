# Exercises keras.io guide "Customizing what happens in fit()" (providing your own evaluation step).
import json

import numpy as np

import tapeflow as keras


class CustomModel(keras.Model):
    def test_step(self, data):
        x, y = data
        y_pred = self(x, training=False)
        loss = self.compute_loss(y=y, y_pred=y_pred)
        for metric in self.metrics:
            if metric.name == "loss":
                metric.update_state(loss)
            else:
                metric.update_state(y, y_pred)
        return {m.name: m.result() for m in self.metrics}


inputs = keras.Input(shape=(32,))
outputs = keras.layers.Dense(1)(inputs)
model = CustomModel(inputs, outputs)
model.compile(loss="mse", metrics=["mae"])

rng = np.random.default_rng(0)
x = rng.random((256, 32)).astype("float32")
y = x[:, :4].sum(axis=1, keepdims=True)
before = model.evaluate(x, y, return_dict=True, verbose=0)
model.compile(optimizer="adam", loss="mse", metrics=["mae"])
history = model.fit(x, y, epochs=3, verbose=0)
after = model.evaluate(x, y, verbose=0)
assert isinstance(after, list) and len(after) == 2, after
assert after[0] < before["loss"], (before, after)
print("KERAS_SCRIPT_RESULT", json.dumps({"losses": [float(v) for v in history.history["loss"]]}))
