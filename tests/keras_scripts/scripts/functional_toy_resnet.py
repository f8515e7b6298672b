# Exercises keras.io guide "The Functional API" (a toy ResNet model for CIFAR10).
import json

import numpy as np

import tapeflow as keras
from tapeflow import layers

inputs = keras.Input(shape=(32, 32, 3), name="img")
x = layers.Conv2D(8, 3, activation="relu")(inputs)
x = layers.Conv2D(16, 3, activation="relu")(x)
block_1_output = layers.MaxPooling2D(3)(x)

x = layers.Conv2D(16, 3, activation="relu", padding="same")(block_1_output)
x = layers.Conv2D(16, 3, activation="relu", padding="same")(x)
block_2_output = layers.add([x, block_1_output])

x = layers.Conv2D(16, 3, activation="relu", padding="same")(block_2_output)
x = layers.Conv2D(16, 3, activation="relu", padding="same")(x)
block_3_output = layers.add([x, block_2_output])

x = layers.Conv2D(16, 3, activation="relu")(block_3_output)
x = layers.GlobalAveragePooling2D()(x)
x = layers.Dense(32, activation="relu")(x)
x = layers.Dropout(0.5)(x)
outputs = layers.Dense(10)(x)

model = keras.Model(inputs, outputs, name="toy_resnet")
model.summary()

rng = np.random.default_rng(0)
y_train = rng.integers(0, 10, 128)
x_train = rng.uniform(0, 0.3, (128, 32, 32, 3)).astype("float32")
x_train[np.arange(128), :, :, y_train % 3] += (y_train[:, None, None] / 10.0).astype("float32")
y_train = keras.utils.to_categorical(y_train, 10)

model.compile(
    optimizer=keras.optimizers.RMSprop(1e-3),
    loss=keras.losses.CategoricalCrossentropy(from_logits=True),
    metrics=["acc"],
)
history = model.fit(x_train, y_train, batch_size=32, epochs=3, validation_split=0.2, verbose=0)
print("KERAS_SCRIPT_RESULT", json.dumps({"losses": [float(v) for v in history.history["loss"]]}))
