# Exercises keras.io example "Image classification from scratch".
import json

import numpy as np

import tapeflow as keras
from tapeflow import layers

image_size = (32, 32)
rng = np.random.default_rng(0)
labels = rng.integers(0, 2, 96)
images = rng.uniform(0, 120, (96, *image_size, 3)).astype("float32")
images[labels == 1, 8:24, 8:24, :] += 120  # the "dog" class has a bright centre

data_augmentation_layers = [layers.RandomFlip("horizontal"), layers.RandomRotation(0.1)]


def data_augmentation(images):
    for layer in data_augmentation_layers:
        images = layer(images)
    return images


def make_model(input_shape, num_classes):
    inputs = keras.Input(shape=input_shape)
    x = data_augmentation(inputs)
    x = layers.Rescaling(1.0 / 255)(x)
    x = layers.Conv2D(16, 3, strides=2, padding="same")(x)
    x = layers.BatchNormalization()(x)
    x = layers.Activation("relu")(x)

    previous_block_activation = x
    for size in [16, 32]:
        x = layers.Activation("relu")(x)
        x = layers.SeparableConv2D(size, 3, padding="same")(x)
        x = layers.BatchNormalization()(x)
        x = layers.Activation("relu")(x)
        x = layers.SeparableConv2D(size, 3, padding="same")(x)
        x = layers.BatchNormalization()(x)
        x = layers.MaxPooling2D(3, strides=2, padding="same")(x)
        residual = layers.Conv2D(size, 1, strides=2, padding="same")(previous_block_activation)
        x = layers.add([x, residual])
        previous_block_activation = x

    x = layers.SeparableConv2D(32, 3, padding="same")(x)
    x = layers.BatchNormalization()(x)
    x = layers.Activation("relu")(x)
    x = layers.GlobalAveragePooling2D()(x)
    units = 1 if num_classes == 2 else num_classes
    x = layers.Dropout(0.25)(x)
    outputs = layers.Dense(units, activation=None)(x)
    return keras.Model(inputs, outputs)


model = make_model(input_shape=image_size + (3,), num_classes=2)
callbacks = [keras.callbacks.ModelCheckpoint("save_at_{epoch}.keras")]
model.compile(
    optimizer=keras.optimizers.Adam(3e-3),
    loss=keras.losses.BinaryCrossentropy(from_logits=True),
    metrics=[keras.metrics.BinaryAccuracy(name="acc")],
)
history = model.fit(
    images, labels.astype("float32"), epochs=3, batch_size=32, callbacks=callbacks, validation_split=0.25, verbose=0
)

img_array = keras.ops.expand_dims(images[0], 0)
predictions = model.predict(img_array, verbose=0)
score = float(keras.ops.sigmoid(predictions[0][0]))
print(f"This image is {100 * (1 - score):.2f}% cat and {100 * score:.2f}% dog.")
print("KERAS_SCRIPT_RESULT", json.dumps({"losses": [float(v) for v in history.history["loss"]]}))
