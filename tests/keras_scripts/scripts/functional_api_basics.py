# Exercises keras.io guide "The Functional API" (first model: training, evaluation, save and load).
import json

import numpy as np

import tapeflow as keras
from tapeflow import layers

inputs = keras.Input(shape=(784,))
dense = layers.Dense(32, activation="relu")
x = dense(inputs)
x = layers.Dense(32, activation="relu")(x)
outputs = layers.Dense(10)(x)
model = keras.Model(inputs=inputs, outputs=outputs, name="mnist_model")
model.summary()

rng = np.random.default_rng(0)
y_train = rng.integers(0, 10, 512)
x_train = rng.normal(0, 0.3, (512, 784)).astype("float32")
x_train[np.arange(512), y_train * 70] += 3.0

model.compile(
    loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True),
    optimizer=keras.optimizers.RMSprop(),
    metrics=["accuracy"],
)
history = model.fit(x_train, y_train, batch_size=64, epochs=3, validation_split=0.2, verbose=0)
test_scores = model.evaluate(x_train[:100], y_train[:100], verbose=2)
print("Test loss:", test_scores[0])
print("Test accuracy:", test_scores[1])

model.save("my_model.keras")
del model
model = keras.models.load_model("my_model.keras")
reloaded_scores = model.evaluate(x_train[:100], y_train[:100], verbose=0)
assert np.allclose(reloaded_scores, test_scores, rtol=1e-5, atol=1e-6), (reloaded_scores, test_scores)
print("KERAS_SCRIPT_RESULT", json.dumps({"losses": [float(v) for v in history.history["loss"]]}))
