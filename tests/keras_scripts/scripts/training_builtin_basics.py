# Exercises keras.io guide "Training & evaluation with the built-in methods" (the end-to-end API overview).
import json

import numpy as np

import tapeflow as keras
from tapeflow import layers

inputs = keras.Input(shape=(784,), name="digits")
x = layers.Dense(32, activation="relu", name="dense_1")(inputs)
x = layers.Dense(32, activation="relu", name="dense_2")(x)
outputs = layers.Dense(10, activation="softmax", name="predictions")(x)
model = keras.Model(inputs=inputs, outputs=outputs)

rng = np.random.default_rng(0)
y_train = rng.integers(0, 10, 600).astype("float32")
x_train = rng.normal(0, 0.3, (600, 784)).astype("float32")
x_train[np.arange(600), y_train.astype(int) * 70] += 3.0
x_val, y_val = x_train[-100:], y_train[-100:]
x_train, y_train = x_train[:-100], y_train[:-100]

model.compile(
    optimizer=keras.optimizers.RMSprop(),
    loss=keras.losses.SparseCategoricalCrossentropy(),
    metrics=[keras.metrics.SparseCategoricalAccuracy()],
)
history = model.fit(x_train, y_train, batch_size=64, epochs=3, validation_data=(x_val, y_val), verbose=0)
assert sorted(history.history) == ["loss", "sparse_categorical_accuracy", "val_loss", "val_sparse_categorical_accuracy"]

results = model.evaluate(x_val, y_val, batch_size=128, verbose=0)
print("test loss, test acc:", results)
assert len(results) == 2
predictions = model.predict(x_val[:3], verbose=0)
assert predictions.shape == (3, 10)
print("KERAS_SCRIPT_RESULT", json.dumps({"losses": [float(v) for v in history.history["loss"]]}))
