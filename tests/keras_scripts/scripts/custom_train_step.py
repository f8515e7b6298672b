# Exercises keras.io guide "Customizing what happens in fit() with PyTorch" (train_step, sample weights).
import json

import numpy as np

import tapeflow as keras


def loss_and_gradients(compute_loss, variables):
    """compute_loss() and its gradients with respect to `variables`, by the backend's autodiff."""
    if keras.__name__ == "tapeflow":
        with keras.GradientTape() as tape:
            loss = compute_loss()
        return loss, tape.gradient(loss, variables)
    import torch  # the Keras reference runs on its torch backend, imported lazily

    loss = compute_loss()
    return loss, list(torch.autograd.grad(loss, [v.value for v in variables]))


class CustomModel(keras.Model):
    def train_step(self, data):
        if len(data) == 3:
            x, y, sample_weight = data
        else:
            sample_weight = None
            x, y = data

        def loss_fn():
            y_pred = self(x, training=True)
            return self.compute_loss(y=y, y_pred=y_pred, sample_weight=sample_weight)

        trainable_weights = self.trainable_weights
        loss, gradients = loss_and_gradients(loss_fn, trainable_weights)
        self.optimizer.apply(gradients, trainable_weights)

        y_pred = self(x, training=False)
        for metric in self.metrics:
            if metric.name == "loss":
                metric.update_state(loss)
            else:
                metric.update_state(y, y_pred, sample_weight=sample_weight)
        return {m.name: m.result() for m in self.metrics}


inputs = keras.Input(shape=(32,))
outputs = keras.layers.Dense(1)(inputs)
model = CustomModel(inputs, outputs)
model.compile(optimizer="adam", loss="mse", metrics=["mae"])

rng = np.random.default_rng(0)
x = rng.random((256, 32)).astype("float32")
y = x[:, :4].sum(axis=1, keepdims=True)
sw = rng.random((256, 1)).astype("float32")
history = model.fit(x, y, sample_weight=sw, epochs=3, verbose=0)
assert "mae" in history.history
print("KERAS_SCRIPT_RESULT", json.dumps({"losses": [float(v) for v in history.history["loss"]]}))
