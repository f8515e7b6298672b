# Exercises keras.io guide "The Functional API" (shared layers; extracting and reusing nodes of the layer graph).
import json

import numpy as np

import tapeflow as keras
from tapeflow import layers

shared_embedding = layers.Embedding(1000, 16)
text_input_a = keras.Input(shape=(None,), dtype="int32")
text_input_b = keras.Input(shape=(None,), dtype="int32")
encoded_input_a = shared_embedding(text_input_a)
encoded_input_b = shared_embedding(text_input_b)
pooled = layers.GlobalAveragePooling1D()
merged = layers.concatenate([pooled(encoded_input_a), pooled(encoded_input_b)])
score = layers.Dense(1, activation="sigmoid")(merged)
model = keras.Model([text_input_a, text_input_b], score)
assert len(model.trainable_weights) == 3

rng = np.random.default_rng(0)
a = rng.integers(0, 1000, (128, 8))
b = rng.integers(0, 1000, (128, 8))
y = (a[:, 0] < 500).astype("float32")
model.compile(optimizer=keras.optimizers.Adam(1e-2), loss="binary_crossentropy")
history = model.fit([a, b], y, batch_size=32, epochs=3, verbose=0)

# A feature-extraction model over the intermediate outputs of another model.
base_input = keras.Input((20,))
hidden = layers.Dense(8, activation="relu")(base_input)
base = keras.Model(base_input, layers.Dense(4)(hidden))
features_list = [layer.output for layer in base.layers]
feat_extraction_model = keras.Model(inputs=base.input, outputs=features_list)
extracted = feat_extraction_model(rng.normal(size=(3, 20)).astype("float32"))
assert [tuple(f.shape) for f in extracted] == [(3, 20), (3, 8), (3, 4)]
print("KERAS_SCRIPT_RESULT", json.dumps({"losses": [float(v) for v in history.history["loss"]]}))
