# Exercises keras.io example "Character-level recurrent sequence-to-sequence model".
import json

import numpy as np

import tapeflow as keras

num_encoder_tokens = 12
num_decoder_tokens = 10
latent_dim = 16
max_encoder_seq_length = 5
max_decoder_seq_length = 6

# One-hot encoded synthetic "sentence pairs": the target echoes the source's tokens.
rng = np.random.default_rng(0)
n = 64
src = rng.integers(0, num_encoder_tokens, (n, max_encoder_seq_length))
tgt = np.concatenate([np.zeros((n, 1), int), src % num_decoder_tokens], axis=1)
encoder_input_data = np.eye(num_encoder_tokens, dtype="float32")[src]
decoder_input_data = np.eye(num_decoder_tokens, dtype="float32")[tgt]
decoder_target_data = np.zeros_like(decoder_input_data)
decoder_target_data[:, :-1] = decoder_input_data[:, 1:]

encoder_inputs = keras.Input(shape=(None, num_encoder_tokens))
encoder = keras.layers.LSTM(latent_dim, return_state=True)
encoder_outputs, state_h, state_c = encoder(encoder_inputs)
encoder_states = [state_h, state_c]

decoder_inputs = keras.Input(shape=(None, num_decoder_tokens))
decoder_lstm = keras.layers.LSTM(latent_dim, return_sequences=True, return_state=True)
decoder_outputs, _, _ = decoder_lstm(decoder_inputs, initial_state=encoder_states)
decoder_dense = keras.layers.Dense(num_decoder_tokens, activation="softmax")
decoder_outputs = decoder_dense(decoder_outputs)

model = keras.Model([encoder_inputs, decoder_inputs], decoder_outputs)
model.compile(optimizer="rmsprop", loss="categorical_crossentropy", metrics=["accuracy"])
history = model.fit(
    [encoder_input_data, decoder_input_data],
    decoder_target_data,
    batch_size=32,
    epochs=3,
    validation_split=0.2,
    verbose=0,
)
model.save("s2s_model.keras")

# Inference models rebuilt from the trained layers.
model = keras.models.load_model("s2s_model.keras")
encoder_inputs = model.input[0]
encoder_outputs, state_h_enc, state_c_enc = model.layers[2].output
encoder_model = keras.Model(encoder_inputs, [state_h_enc, state_c_enc])

decoder_inputs = model.input[1]
decoder_state_input_h = keras.Input(shape=(latent_dim,))
decoder_state_input_c = keras.Input(shape=(latent_dim,))
decoder_states_inputs = [decoder_state_input_h, decoder_state_input_c]
decoder_lstm = model.layers[3]
decoder_outputs, state_h_dec, state_c_dec = decoder_lstm(decoder_inputs, initial_state=decoder_states_inputs)
decoder_dense = model.layers[4]
decoder_outputs = decoder_dense(decoder_outputs)
decoder_model = keras.Model([decoder_inputs] + decoder_states_inputs, [decoder_outputs, state_h_dec, state_c_dec])

states_value = encoder_model.predict(encoder_input_data[:1], verbose=0)
target_seq = np.zeros((1, 1, num_decoder_tokens), "float32")
target_seq[0, 0, 0] = 1.0
decoded = []
for _ in range(max_decoder_seq_length):
    output_tokens, h, c = decoder_model.predict([target_seq] + states_value, verbose=0)
    token = int(np.argmax(output_tokens[0, -1, :]))
    decoded.append(token)
    target_seq = np.zeros((1, 1, num_decoder_tokens), "float32")
    target_seq[0, 0, token] = 1.0
    states_value = [h, c]
print("decoded:", decoded)
print("KERAS_SCRIPT_RESULT", json.dumps({"losses": [float(v) for v in history.history["loss"]]}))
