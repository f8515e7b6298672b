# Exercises keras.io example "Timeseries classification with a Transformer model".
import json

import numpy as np

import tapeflow as keras
from tapeflow import layers

rng = np.random.default_rng(0)
n, length = 128, 40
y_train = rng.integers(0, 2, n)
t = np.linspace(0, 1, length)
x_train = np.sin(2 * np.pi * (2 + 3 * y_train[:, None]) * t) + rng.normal(0, 0.3, (n, length))
x_train = x_train.reshape((n, length, 1)).astype("float32")
n_classes = 2


def transformer_encoder(inputs, head_size, num_heads, ff_dim, dropout=0):
    x = layers.MultiHeadAttention(key_dim=head_size, num_heads=num_heads, dropout=dropout)(inputs, inputs)
    x = layers.Dropout(dropout)(x)
    x = layers.LayerNormalization(epsilon=1e-6)(x)
    res = x + inputs

    x = layers.Conv1D(filters=ff_dim, kernel_size=1, activation="relu")(res)
    x = layers.Dropout(dropout)(x)
    x = layers.Conv1D(filters=inputs.shape[-1], kernel_size=1)(x)
    x = layers.LayerNormalization(epsilon=1e-6)(x)
    return x + res


def build_model(input_shape, head_size, num_heads, ff_dim, num_transformer_blocks, mlp_units, dropout=0, mlp_dropout=0):
    inputs = keras.Input(shape=input_shape)
    x = inputs
    for _ in range(num_transformer_blocks):
        x = transformer_encoder(x, head_size, num_heads, ff_dim, dropout)
    x = layers.GlobalAveragePooling1D(data_format="channels_first")(x)
    for dim in mlp_units:
        x = layers.Dense(dim, activation="relu")(x)
        x = layers.Dropout(mlp_dropout)(x)
    outputs = layers.Dense(n_classes, activation="softmax")(x)
    return keras.Model(inputs, outputs)


model = build_model(
    x_train.shape[1:],
    head_size=8,
    num_heads=2,
    ff_dim=4,
    num_transformer_blocks=2,
    mlp_units=[16],
    mlp_dropout=0.4,
    dropout=0.25,
)
model.compile(
    loss="sparse_categorical_crossentropy",
    optimizer=keras.optimizers.Adam(learning_rate=1e-3),
    metrics=["sparse_categorical_accuracy"],
)
callbacks = [keras.callbacks.EarlyStopping(patience=10, restore_best_weights=True)]
history = model.fit(x_train, y_train, validation_split=0.2, epochs=3, batch_size=32, callbacks=callbacks, verbose=0)
model.evaluate(x_train, y_train, verbose=0)
print("KERAS_SCRIPT_RESULT", json.dumps({"losses": [float(v) for v in history.history["loss"]]}))
