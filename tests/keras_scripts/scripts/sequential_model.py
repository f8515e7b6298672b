# Exercises keras.io guide "The Sequential model".
import json

import numpy as np

import tapeflow as keras
from tapeflow import layers

model = keras.Sequential(name="my_sequential")
model.add(keras.Input(shape=(4,)))
model.add(layers.Dense(8, activation="relu", name="layer1"))
model.add(layers.Dense(6, activation="relu", name="layer2"))
model.add(layers.Dense(3, name="layer3"))
model.add(layers.Dense(3, name="extra"))
model.pop()
assert len(model.layers) == 3
model.summary()

# Without an Input, weights are created on the first call.
lazy = keras.Sequential([layers.Dense(2, activation="relu"), layers.Dense(3)])
y = lazy(np.ones((1, 4), "float32"))
assert len(lazy.weights) == 4

# Feature extraction: a model returning every layer's output.
extractor = keras.Model(inputs=model.inputs, outputs=[layer.output for layer in model.layers])
features = extractor(np.ones((1, 4), "float32"))
assert len(features) == 3

# Transfer-learning style freezing.
for layer in model.layers[:-1]:
    layer.trainable = False
assert len(model.trainable_weights) == 2
for layer in model.layers:
    layer.trainable = True

rng = np.random.default_rng(0)
x = rng.normal(size=(256, 4)).astype("float32")
y = np.argmax(x[:, :3], axis=1)
model.compile(optimizer="adam", loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True))
history = model.fit(x, y, batch_size=32, epochs=4, verbose=0)
print("KERAS_SCRIPT_RESULT", json.dumps({"losses": [float(v) for v in history.history["loss"]]}))
