# Exercises keras.io guide "The Functional API" (models with multiple inputs and outputs: ticket ranking).
import json

import numpy as np

import tapeflow as keras
from tapeflow import layers

num_tags = 12
num_words = 1000
num_departments = 4

title_input = keras.Input(shape=(None,), name="title")
body_input = keras.Input(shape=(None,), name="body")
tags_input = keras.Input(shape=(num_tags,), name="tags")

title_features = layers.Embedding(num_words, 16)(title_input)
body_features = layers.Embedding(num_words, 16)(body_input)
title_features = layers.LSTM(16)(title_features)
body_features = layers.LSTM(8)(body_features)

x = layers.concatenate([title_features, body_features, tags_input])
priority_pred = layers.Dense(1, name="priority")(x)
department_pred = layers.Dense(num_departments, name="department")(x)

model = keras.Model(
    inputs=[title_input, body_input, tags_input],
    outputs={"priority": priority_pred, "department": department_pred},
)

model.compile(
    optimizer=keras.optimizers.RMSprop(1e-3),
    loss={
        "priority": keras.losses.BinaryCrossentropy(from_logits=True),
        "department": keras.losses.CategoricalCrossentropy(from_logits=True),
    },
    loss_weights={"priority": 1.0, "department": 0.2},
)

rng = np.random.default_rng(0)
title_data = rng.integers(0, num_words, size=(64, 6))
body_data = rng.integers(0, num_words, size=(64, 8))
tags_data = rng.integers(0, 2, size=(64, num_tags)).astype("float32")
priority_targets = tags_data[:, :1].copy()
dept_targets = keras.utils.to_categorical(tags_data[:, 1:3] @ np.array([1, 2]), num_departments)

history = model.fit(
    {"title": title_data, "body": body_data, "tags": tags_data},
    {"priority": priority_targets, "department": dept_targets},
    epochs=3,
    batch_size=32,
    verbose=0,
)
predictions = model.predict({"title": title_data[:4], "body": body_data[:4], "tags": tags_data[:4]}, verbose=0)
assert predictions["priority"].shape == (4, 1) and predictions["department"].shape == (4, num_departments)
print("KERAS_SCRIPT_RESULT", json.dumps({"losses": [float(v) for v in history.history["loss"]]}))
