# Exercises keras.io guide "Training & evaluation with the built-in methods" (callbacks, checkpoints, schedules).
import json
import os

import numpy as np

import tapeflow as keras
from tapeflow import layers


def make_model(optimizer):
    inputs = keras.Input(shape=(32,), name="digits")
    x = layers.Dense(16, activation="relu")(inputs)
    outputs = layers.Dense(10, activation="softmax")(x)
    model = keras.Model(inputs=inputs, outputs=outputs)
    model.compile(optimizer=optimizer, loss="sparse_categorical_crossentropy", metrics=["sparse_categorical_accuracy"])
    return model


rng = np.random.default_rng(0)
y_train = rng.integers(0, 10, 256)
x_train = rng.normal(0, 0.3, (256, 32)).astype("float32")
x_train[np.arange(256), y_train * 3] += 3.0

lr_schedule = keras.optimizers.schedules.ExponentialDecay(0.01, decay_steps=10, decay_rate=0.96, staircase=True)
model = make_model(keras.optimizers.RMSprop(learning_rate=lr_schedule))

checkpoint_dir = "./ckpt"
os.makedirs(checkpoint_dir, exist_ok=True)
callbacks = [
    keras.callbacks.EarlyStopping(monitor="val_loss", min_delta=1e-2, patience=2, verbose=1),
    keras.callbacks.ModelCheckpoint(
        filepath=os.path.join(checkpoint_dir, "mymodel_{epoch}.keras"),
        save_best_only=True,
        monitor="val_loss",
        verbose=1,
    ),
]
history = model.fit(x_train, y_train, epochs=3, batch_size=32, callbacks=callbacks, validation_split=0.2, verbose=0)

checkpoints = [os.path.join(checkpoint_dir, name) for name in os.listdir(checkpoint_dir)]
latest_checkpoint = max(checkpoints, key=os.path.getctime)
restored = keras.models.load_model(latest_checkpoint)
assert restored.predict(x_train[:2], verbose=0).shape == (2, 10)
print("KERAS_SCRIPT_RESULT", json.dumps({"losses": [float(v) for v in history.history["loss"]]}))
