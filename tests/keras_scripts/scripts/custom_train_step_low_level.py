# Exercises keras.io guide "Customizing what happens in fit() with PyTorch" (going lower-level).
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
    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.loss_tracker = keras.metrics.Mean(name="loss")
        self.mae_metric = keras.metrics.MeanAbsoluteError(name="mae")
        self.loss_fn = keras.losses.MeanSquaredError()

    def train_step(self, data):
        x, y = data

        def loss_fn():
            y_pred = self(x, training=True)
            return self.loss_fn(y, y_pred)

        trainable_weights = self.trainable_weights
        loss, gradients = loss_and_gradients(loss_fn, trainable_weights)
        self.optimizer.apply(gradients, trainable_weights)

        self.loss_tracker.update_state(loss)
        self.mae_metric.update_state(y, self(x, training=False))
        return {"loss": self.loss_tracker.result(), "mae": self.mae_metric.result()}

    @property
    def metrics(self):
        # Listed here so that fit() resets them at the start of each epoch.
        return [self.loss_tracker, self.mae_metric]


inputs = keras.Input(shape=(32,))
outputs = keras.layers.Dense(1)(inputs)
model = CustomModel(inputs, outputs)
model.compile(optimizer="adam")

rng = np.random.default_rng(0)
x = rng.random((256, 32)).astype("float32")
y = x[:, :4].sum(axis=1, keepdims=True)
history = model.fit(x, y, epochs=3, verbose=0)
print("KERAS_SCRIPT_RESULT", json.dumps({"losses": [float(v) for v in history.history["loss"]]}))
