# Exercises keras.io example "Timeseries classification from scratch".
import json

import numpy as np

import tapeflow as keras

# Stand-in for FordA: univariate series whose class sets the frequency of a sine.
rng = np.random.default_rng(0)
n, length = 128, 50
y_train = rng.integers(0, 2, n)
t = np.linspace(0, 1, length)
x_train = np.sin(2 * np.pi * (2 + 3 * y_train[:, None]) * t) + rng.normal(0, 0.3, (n, length))
x_train = x_train.reshape((x_train.shape[0], x_train.shape[1], 1)).astype("float32")
num_classes = len(np.unique(y_train))
idx = np.random.permutation(len(x_train))
x_train, y_train = x_train[idx], y_train[idx]


def make_model(input_shape):
    input_layer = keras.layers.Input(input_shape)

    conv1 = keras.layers.Conv1D(filters=16, kernel_size=3, padding="same")(input_layer)
    conv1 = keras.layers.BatchNormalization()(conv1)
    conv1 = keras.layers.ReLU()(conv1)

    conv2 = keras.layers.Conv1D(filters=16, kernel_size=3, padding="same")(conv1)
    conv2 = keras.layers.BatchNormalization()(conv2)
    conv2 = keras.layers.ReLU()(conv2)

    conv3 = keras.layers.Conv1D(filters=16, kernel_size=3, padding="same")(conv2)
    conv3 = keras.layers.BatchNormalization()(conv3)
    conv3 = keras.layers.ReLU()(conv3)

    gap = keras.layers.GlobalAveragePooling1D()(conv3)
    output_layer = keras.layers.Dense(num_classes, activation="softmax")(gap)
    return keras.models.Model(inputs=input_layer, outputs=output_layer)


model = make_model(input_shape=x_train.shape[1:])
callbacks = [
    keras.callbacks.ModelCheckpoint("best_model.keras", save_best_only=True, monitor="val_loss"),
    keras.callbacks.ReduceLROnPlateau(monitor="val_loss", factor=0.5, patience=20, min_lr=0.0001),
    keras.callbacks.EarlyStopping(monitor="val_loss", patience=50, verbose=1),
]
model.compile(optimizer="adam", loss="sparse_categorical_crossentropy", metrics=["sparse_categorical_accuracy"])
history = model.fit(x_train, y_train, batch_size=32, epochs=3, callbacks=callbacks, validation_split=0.2, verbose=0)

model = keras.models.load_model("best_model.keras")
test_loss, test_acc = model.evaluate(x_train, y_train, verbose=0)
print("Test accuracy", test_acc)
print("KERAS_SCRIPT_RESULT", json.dumps({"losses": [float(v) for v in history.history["loss"]]}))
