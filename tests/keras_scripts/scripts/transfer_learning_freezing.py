# Exercises keras.io guide "Transfer learning & fine-tuning" (freezing layers).
import json

import numpy as np

import tapeflow as keras

keras.utils.set_random_seed(7)

layer = keras.layers.Dense(3)
layer.build((None, 4))
assert len(layer.weights) == 2 and len(layer.trainable_weights) == 2 and len(layer.non_trainable_weights) == 0

layer = keras.layers.BatchNormalization()
layer.build((None, 4))
assert len(layer.weights) == 4 and len(layer.trainable_weights) == 2 and len(layer.non_trainable_weights) == 2

layer = keras.layers.Dense(3)
layer.build((None, 4))
layer.trainable = False
assert len(layer.trainable_weights) == 0 and len(layer.non_trainable_weights) == 2

# A frozen layer's weights do not change during fit.
layer1 = keras.layers.Dense(3, activation="relu")
layer2 = keras.layers.Dense(3, activation="sigmoid")
model = keras.Sequential([keras.Input(shape=(3,)), layer1, layer2])
layer1.trainable = False
initial_layer1_weights_values = layer1.get_weights()
model.compile(optimizer="adam", loss="mse")
model.fit(np.random.random((2, 3)), np.random.random((2, 3)), verbose=0)
for before, after in zip(initial_layer1_weights_values, layer1.get_weights(), strict=True):
    np.testing.assert_allclose(before, after)

# Recursive freezing.
inner_model = keras.Sequential(
    [keras.Input(shape=(3,)), keras.layers.Dense(3, activation="relu"), keras.layers.Dense(3, activation="relu")]
)
model = keras.Sequential([keras.Input(shape=(3,)), inner_model, keras.layers.Dense(3, activation="sigmoid")])
model.trainable = False
assert inner_model.trainable is False and inner_model.layers[0].trainable is False

# The typical workflow: a frozen base model called with training=False, a new head trained on top.
base_model = keras.Sequential(
    [keras.Input(shape=(8, 8, 3)), keras.layers.Conv2D(8, 3, activation="relu"), keras.layers.BatchNormalization()],
    name="base",
)
base_model.trainable = False
inputs = keras.Input(shape=(8, 8, 3))
x = base_model(inputs, training=False)
x = keras.layers.GlobalAveragePooling2D()(x)
x = keras.layers.Dropout(0.2)(x)
outputs = keras.layers.Dense(1)(x)
model = keras.Model(inputs, outputs)

rng = np.random.default_rng(0)
x_train = rng.random((128, 8, 8, 3)).astype("float32")
y_train = rng.integers(0, 2, 128).astype("float32")
x_train += y_train[:, None, None, None]
model.compile(
    optimizer=keras.optimizers.Adam(1e-2),
    loss=keras.losses.BinaryCrossentropy(from_logits=True),
    metrics=[keras.metrics.BinaryAccuracy()],
)
moving_mean = base_model.layers[-1].moving_mean.numpy().copy()
history = model.fit(x_train, y_train, epochs=6, batch_size=16, verbose=0)
np.testing.assert_allclose(base_model.layers[-1].moving_mean.numpy(), moving_mean)

# Fine-tuning: unfreeze, recompile with a low learning rate, train again.
base_model.trainable = True
model.compile(optimizer=keras.optimizers.Adam(1e-5), loss=keras.losses.BinaryCrossentropy(from_logits=True))
model.fit(x_train, y_train, epochs=1, batch_size=32, verbose=0)
print("KERAS_SCRIPT_RESULT", json.dumps({"losses": [float(v) for v in history.history["loss"]]}))
