# Exercises keras.io guide "Working with RNNs" (built-in RNN layers, outputs and states, bidirectional RNNs).
import json

import numpy as np

import tapeflow as keras
from tapeflow import layers

model = keras.Sequential()
model.add(keras.Input(shape=(None,), dtype="int32"))
model.add(layers.Embedding(input_dim=1000, output_dim=16))
model.add(layers.LSTM(16))
model.add(layers.Dense(10))
model.summary()

model_gru = keras.Sequential(
    [
        keras.Input(shape=(None,), dtype="int32"),
        layers.Embedding(input_dim=1000, output_dim=16),
        layers.GRU(16, return_sequences=True),
        layers.SimpleRNN(8),
        layers.Dense(10),
    ]
)

# Returning the last states as well as the outputs.
encoder_input = keras.Input(shape=(None,))
encoder_embedded = layers.Embedding(input_dim=1000, output_dim=16)(encoder_input)
output, state_h, state_c = layers.LSTM(16, return_state=True, name="encoder")(encoder_embedded)
assert tuple(output.shape) == (None, 16) and tuple(state_h.shape) == (None, 16)

bidirectional = keras.Sequential(
    [
        keras.Input(shape=(5, 10)),
        layers.Bidirectional(layers.LSTM(8, return_sequences=True)),
        layers.Bidirectional(layers.LSTM(4)),
        layers.Dense(10),
    ]
)
assert bidirectional.output_shape == (None, 10)

rng = np.random.default_rng(0)
x_train = rng.integers(1, 20, (128, 6))
y_train = x_train[:, -1] % 10
for m in (model_gru,):
    m.compile(optimizer="adam", loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True))
model.compile(
    loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True),
    optimizer=keras.optimizers.SGD(learning_rate=0.1),
    metrics=["accuracy"],
)
history = model.fit(x_train, y_train, batch_size=64, epochs=3, verbose=0)
model_gru.fit(x_train, y_train, batch_size=64, epochs=1, verbose=0)
print("KERAS_SCRIPT_RESULT", json.dumps({"losses": [float(v) for v in history.history["loss"]]}))
