# Exercises keras.io guide "Save, serialize, and export models".
import json

import numpy as np

import tapeflow as keras
from tapeflow import layers


@keras.saving.register_keras_serializable(package="my_package", name="custom_fn")
def custom_fn(x):
    return x**2


@keras.saving.register_keras_serializable(package="MyLayers")
class CustomLayer(keras.layers.Layer):
    def __init__(self, factor, **kwargs):
        super().__init__(**kwargs)
        self.factor = factor

    def call(self, x):
        return x * self.factor

    def get_config(self):
        config = super().get_config()
        config.update({"factor": self.factor})
        return config


def get_model():
    inputs = keras.Input(shape=(32,))
    x = CustomLayer(0.5)(inputs)
    x = layers.Dense(8, activation=custom_fn)(x)
    outputs = layers.Dense(1)(x)
    model = keras.Model(inputs, outputs)
    model.compile(optimizer=keras.optimizers.Adam(1e-3), loss="mean_squared_error")
    return model


rng = np.random.default_rng(0)
x = rng.random((128, 32)).astype("float32")
y = x[:, :2].sum(axis=1, keepdims=True)

model = get_model()
history = model.fit(x, y, epochs=3, batch_size=32, verbose=0)
model.save("custom_model.keras")

reconstructed_model = keras.models.load_model("custom_model.keras")
np.testing.assert_allclose(model.predict(x, verbose=0), reconstructed_model.predict(x, verbose=0), rtol=1e-5, atol=1e-6)
reconstructed_model.fit(x, y, epochs=1, verbose=0)

# Config only: architecture without weights.
config = model.get_config()
new_model = keras.Model.from_config(config, custom_objects={"CustomLayer": CustomLayer, "custom_fn": custom_fn})
assert len(new_model.weights) == len(model.weights)
json_config = model.to_json()
from_json = keras.models.model_from_json(json_config)
assert len(from_json.layers) == len(model.layers)

# Weights only.
model.save_weights("model.weights.h5")
clone = get_model()
clone.load_weights("model.weights.h5")
np.testing.assert_allclose(model.predict(x, verbose=0), clone.predict(x, verbose=0), rtol=1e-5, atol=1e-6)
clone.set_weights(model.get_weights())
print("KERAS_SCRIPT_RESULT", json.dumps({"losses": [float(v) for v in history.history["loss"]]}))
