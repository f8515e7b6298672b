# Exercises keras.io example "Simple MNIST convnet".
import json

import numpy as np

import tapeflow as keras
from tapeflow import layers

num_classes = 10
input_shape = (28, 28, 1)

# Small stand-in for MNIST: the class decides which image quadrant is bright.
rng = np.random.default_rng(0)
labels = rng.integers(0, num_classes, 256)
images = rng.uniform(0, 64, (256, 28, 28)).astype("uint8")
for i, c in enumerate(labels):
    images[i, (c % 4) * 7 : (c % 4) * 7 + 7, (c // 4) * 9 : (c // 4) * 9 + 9] = 255
x_train = images.astype("float32") / 255
x_train = np.expand_dims(x_train, -1)
y_train = keras.utils.to_categorical(labels, num_classes)

model = keras.Sequential(
    [
        keras.Input(shape=input_shape),
        layers.Conv2D(8, kernel_size=(3, 3), activation="relu"),
        layers.MaxPooling2D(pool_size=(2, 2)),
        layers.Conv2D(16, kernel_size=(3, 3), activation="relu"),
        layers.MaxPooling2D(pool_size=(2, 2)),
        layers.Flatten(),
        layers.Dropout(0.5),
        layers.Dense(num_classes, activation="softmax"),
    ]
)
model.summary()

model.compile(loss="categorical_crossentropy", optimizer="adam", metrics=["accuracy"])
history = model.fit(x_train, y_train, batch_size=64, epochs=3, validation_split=0.1, verbose=0)

score = model.evaluate(x_train[:64], y_train[:64], verbose=0)
print("Test loss:", score[0])
print("Test accuracy:", score[1])
print("KERAS_SCRIPT_RESULT", json.dumps({"losses": [float(v) for v in history.history["loss"]]}))
