# Exercises keras.io guide "Working with RNNs" (passing an encoder's final states as a decoder's initial_state).
import json

import numpy as np

import tapeflow as keras
from tapeflow import layers

encoder_vocab = 100
decoder_vocab = 50

encoder_input = keras.Input(shape=(None,))
encoder_embedded = layers.Embedding(input_dim=encoder_vocab, output_dim=16)(encoder_input)
output, state_h, state_c = layers.LSTM(16, return_state=True, name="encoder")(encoder_embedded)
encoder_state = [state_h, state_c]

decoder_input = keras.Input(shape=(None,))
decoder_embedded = layers.Embedding(input_dim=decoder_vocab, output_dim=16)(decoder_input)
decoder_output = layers.LSTM(16, name="decoder")(decoder_embedded, initial_state=encoder_state)
output = layers.Dense(10)(decoder_output)

model = keras.Model([encoder_input, decoder_input], output)
model.summary()

rng = np.random.default_rng(0)
enc = rng.integers(0, encoder_vocab, (128, 5))
dec = rng.integers(0, decoder_vocab, (128, 4))
y = enc[:, 0] % 10  # only the encoder sees the label: it must reach the decoder through its states
model.compile(optimizer=keras.optimizers.Adam(1e-2), loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True))
history = model.fit([enc, dec], y, batch_size=32, epochs=4, verbose=0)
print("KERAS_SCRIPT_RESULT", json.dumps({"losses": [float(v) for v in history.history["loss"]]}))
