# Exercises keras.io example "Bidirectional LSTM on IMDB".
import json

import numpy as np

import tapeflow as keras
from tapeflow import layers

max_features = 200
maxlen = 10

inputs = keras.Input(shape=(None,), dtype="int32")
x = layers.Embedding(max_features, 16)(inputs)
x = layers.Bidirectional(layers.LSTM(8, return_sequences=True))(x)
x = layers.Bidirectional(layers.LSTM(8))(x)
outputs = layers.Dense(1, activation="sigmoid")(x)
model = keras.Model(inputs, outputs)
model.summary()

rng = np.random.default_rng(0)
reviews = [list(rng.integers(1, max_features, rng.integers(5, 30))) for _ in range(128)]
y_train = np.array([float(np.mean(r) > max_features / 2) for r in reviews])
x_train = keras.utils.pad_sequences(reviews, maxlen=maxlen)
x_val, y_val = x_train[-32:], y_train[-32:]

model.compile(optimizer=keras.optimizers.Adam(1e-2), loss="binary_crossentropy", metrics=["accuracy"])
history = model.fit(x_train, y_train, batch_size=32, epochs=3, validation_data=(x_val, y_val), verbose=0)
print("KERAS_SCRIPT_RESULT", json.dumps({"losses": [float(v) for v in history.history["loss"]]}))
