# Exercises keras.io example "Endpoint layer pattern".
import json

import numpy as np

import tapeflow as keras

keras.utils.set_random_seed(3)


class LogisticEndpoint(keras.layers.Layer):
    def __init__(self, name=None):
        super().__init__(name=name)
        self.loss_fn = keras.losses.BinaryCrossentropy(from_logits=True)
        self.accuracy_fn = keras.metrics.BinaryAccuracy()

    def call(self, logits, targets=None, sample_weight=None):
        if targets is not None:
            loss = self.loss_fn(targets, logits, sample_weight)
            self.add_loss(loss)
            self.accuracy_fn.update_state(targets, logits, sample_weight)
        return keras.ops.softmax(logits)


inputs = keras.Input((764,), name="inputs")
logits = keras.layers.Dense(1)(inputs)
targets = keras.Input((1,), name="targets")
sample_weight = keras.Input((1,), name="sample_weight")
preds = LogisticEndpoint()(logits, targets, sample_weight)
model = keras.Model([inputs, targets, sample_weight], preds)

rng = np.random.default_rng(0)
data = {
    "inputs": rng.random((64, 764)).astype("float32"),
    "targets": rng.integers(0, 2, (64, 1)).astype("float32"),
    "sample_weight": np.ones((64, 1), "float32"),
}
data["inputs"][:, 0] += 3 * data["targets"][:, 0]
model.compile(keras.optimizers.Adam(1e-3))
history = model.fit(data, epochs=3, verbose=0)
print("KERAS_SCRIPT_RESULT", json.dumps({"losses": [float(v) for v in history.history["loss"]]}))
