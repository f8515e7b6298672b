# Exercises keras.io guide "Training & evaluation with the built-in methods" (custom losses, custom metrics, add_loss).
import json

import numpy as np

import tapeflow as keras
from tapeflow import layers, ops


def get_uncompiled_model():
    inputs = keras.Input(shape=(64,), name="digits")
    x = layers.Dense(32, activation="relu", name="dense_1")(inputs)
    x = layers.Dense(32, activation="relu", name="dense_2")(x)
    outputs = layers.Dense(10, activation="softmax", name="predictions")(x)
    return keras.Model(inputs=inputs, outputs=outputs)


def custom_mean_squared_error(y_true, y_pred):
    return ops.mean(ops.square(y_true - y_pred), axis=-1)


class CustomMSE(keras.losses.Loss):
    def __init__(self, regularization_factor=0.1, name="custom_mse"):
        super().__init__(name=name)
        self.regularization_factor = regularization_factor

    def call(self, y_true, y_pred):
        mse = ops.mean(ops.square(y_true - y_pred), axis=-1)
        reg = ops.mean(ops.square(0.5 - y_pred), axis=-1)
        return mse + reg * self.regularization_factor


class CategoricalTruePositives(keras.metrics.Metric):
    def __init__(self, name="categorical_true_positives", **kwargs):
        super().__init__(name=name, **kwargs)
        self.true_positives = self.add_variable(shape=(), name="ctp", initializer="zeros")

    def update_state(self, y_true, y_pred, sample_weight=None):
        y_pred = ops.reshape(ops.argmax(y_pred, axis=1), (-1, 1))
        values = ops.cast(y_true, "int32") == ops.cast(y_pred, "int32")
        values = ops.cast(values, "float32")
        if sample_weight is not None:
            sample_weight = ops.cast(sample_weight, "float32")
            values = ops.multiply(values, sample_weight)
        self.true_positives.assign_add(ops.sum(values))

    def result(self):
        return self.true_positives

    def reset_state(self):
        self.true_positives.assign(0.0)


class ActivityRegularizationLayer(layers.Layer):
    def call(self, inputs):
        self.add_loss(ops.sum(inputs) * 1e-4)
        return inputs


rng = np.random.default_rng(0)
y_train = rng.integers(0, 10, 256)
x_train = rng.normal(0, 0.3, (256, 64)).astype("float32")
x_train[np.arange(256), y_train * 6] += 3.0
y_train_one_hot = ops.convert_to_numpy(ops.one_hot(y_train, num_classes=10))

losses = {}
model = get_uncompiled_model()
model.compile(optimizer=keras.optimizers.Adam(), loss=custom_mean_squared_error)
losses["function"] = model.fit(x_train, y_train_one_hot, batch_size=64, epochs=2, verbose=0).history["loss"]

model = get_uncompiled_model()
model.compile(optimizer=keras.optimizers.Adam(), loss=CustomMSE())
losses["class"] = model.fit(x_train, y_train_one_hot, batch_size=64, epochs=2, verbose=0).history["loss"]

model = get_uncompiled_model()
model.compile(
    optimizer=keras.optimizers.RMSprop(learning_rate=1e-3),
    loss=keras.losses.SparseCategoricalCrossentropy(),
    metrics=[CategoricalTruePositives()],
)
history = model.fit(x_train, y_train, batch_size=64, epochs=3, verbose=0)
assert "categorical_true_positives" in history.history
losses["metric"] = history.history["loss"]

inputs = keras.Input(shape=(64,), name="digits")
x = layers.Dense(32, activation="relu")(inputs)
x = ActivityRegularizationLayer()(x)
outputs = layers.Dense(10, name="predictions")(x)
model = keras.Model(inputs=inputs, outputs=outputs)
model.compile(
    optimizer=keras.optimizers.RMSprop(learning_rate=1e-3),
    loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True),
)
losses["add_loss"] = model.fit(x_train, y_train, batch_size=64, epochs=2, verbose=0).history["loss"]
print(losses)
print("KERAS_SCRIPT_RESULT", json.dumps({"losses": [float(v) for v in history.history["loss"]]}))
