# Exercises keras.io guide "Training & evaluation with the built-in methods" (multi-input, multi-output models).
import json

import numpy as np

import tapeflow as keras
from tapeflow import layers

image_input = keras.Input(shape=(16, 16, 3), name="img_input")
timeseries_input = keras.Input(shape=(None, 10), name="ts_input")

x1 = layers.Conv2D(3, 3)(image_input)
x1 = layers.GlobalMaxPooling2D()(x1)
x2 = layers.Conv1D(3, 3)(timeseries_input)
x2 = layers.GlobalMaxPooling1D()(x2)
x = layers.concatenate([x1, x2])

score_output = layers.Dense(1, name="score_output")(x)
class_output = layers.Dense(5, name="class_output")(x)

model = keras.Model(inputs=[image_input, timeseries_input], outputs=[score_output, class_output])
model.compile(
    optimizer=keras.optimizers.RMSprop(1e-3),
    loss={
        "score_output": keras.losses.MeanSquaredError(),
        "class_output": keras.losses.CategoricalCrossentropy(from_logits=True),
    },
    metrics={
        "score_output": [keras.metrics.MeanAbsolutePercentageError(), keras.metrics.MeanAbsoluteError()],
        "class_output": [keras.metrics.CategoricalAccuracy()],
    },
    loss_weights={"score_output": 2.0, "class_output": 1.0},
)

rng = np.random.default_rng(0)
img_data = rng.random(size=(64, 16, 16, 3)).astype("float32")
ts_data = rng.random(size=(64, 12, 10)).astype("float32")
score_targets = img_data.mean(axis=(1, 2, 3))[:, None]
class_targets = keras.utils.to_categorical((ts_data[:, 0, 0] * 5).astype(int), 5)

history = model.fit(
    {"img_input": img_data, "ts_input": ts_data},
    {"score_output": score_targets, "class_output": class_targets},
    batch_size=32,
    epochs=3,
    verbose=0,
)
print("KERAS_SCRIPT_RESULT", json.dumps({"losses": [float(v) for v in history.history["loss"]]}))
