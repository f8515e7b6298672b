# Exercises keras.io guide "Training & evaluation with the built-in methods" (class weights and sample weights).
import json

import numpy as np

import tapeflow as keras
from tapeflow import layers


def get_compiled_model():
    inputs = keras.Input(shape=(32,), name="digits")
    x = layers.Dense(16, activation="relu", name="dense_1")(inputs)
    outputs = layers.Dense(10, activation="softmax", name="predictions")(x)
    model = keras.Model(inputs=inputs, outputs=outputs)
    model.compile(
        optimizer=keras.optimizers.RMSprop(learning_rate=1e-3),
        loss="sparse_categorical_crossentropy",
        metrics=["sparse_categorical_accuracy"],
    )
    return model


rng = np.random.default_rng(0)
y_train = rng.integers(0, 10, 256)
x_train = rng.normal(0, 0.3, (256, 32)).astype("float32")
x_train[np.arange(256), y_train * 3] += 3.0

class_weight = {c: 1.0 for c in range(10)}
class_weight[5] = 2.0
model = get_compiled_model()
history_cw = model.fit(x_train, y_train, class_weight=class_weight, batch_size=64, epochs=2, verbose=0)

sample_weight = np.ones(shape=(len(y_train),))
sample_weight[y_train == 5] = 2.0
model = get_compiled_model()
history = model.fit(x_train, y_train, sample_weight=sample_weight, batch_size=64, epochs=3, verbose=0)
print("class weights:", history_cw.history["loss"])
print("KERAS_SCRIPT_RESULT", json.dumps({"losses": [float(v) for v in history.history["loss"]]}))
