# Exercises keras.io example "Imbalanced classification: credit card fraud detection".
import json

import numpy as np

import tapeflow as keras

rng = np.random.default_rng(0)
n, num_features = 1024, 30
train_targets = (rng.random(n) < 0.1).astype("uint8")[:, None]
train_features = rng.normal(0, 1, (n, num_features)).astype("float32")
train_features[:, 0] += 2.0 * train_targets[:, 0]
num_val_samples = int(len(train_features) * 0.2)
val_features, val_targets = train_features[-num_val_samples:], train_targets[-num_val_samples:]
train_features, train_targets = train_features[:-num_val_samples], train_targets[:-num_val_samples]

counts = np.bincount(train_targets[:, 0])
mean = np.mean(train_features, axis=0)
train_features -= mean
val_features -= mean
std = np.std(train_features, axis=0)
train_features /= std
val_features /= std

model = keras.Sequential(
    [
        keras.Input(shape=train_features.shape[1:]),
        keras.layers.Dense(32, activation="relu"),
        keras.layers.Dense(32, activation="relu"),
        keras.layers.Dropout(0.3),
        keras.layers.Dense(32, activation="relu"),
        keras.layers.Dropout(0.3),
        keras.layers.Dense(1, activation="sigmoid"),
    ]
)
model.summary()

metrics = [
    keras.metrics.FalseNegatives(name="fn"),
    keras.metrics.FalsePositives(name="fp"),
    keras.metrics.TrueNegatives(name="tn"),
    keras.metrics.TruePositives(name="tp"),
    keras.metrics.Precision(name="precision"),
    keras.metrics.Recall(name="recall"),
]
model.compile(optimizer=keras.optimizers.Adam(1e-2), loss="binary_crossentropy", metrics=metrics)

callbacks = [keras.callbacks.ModelCheckpoint("fraud_model_at_epoch_{epoch}.keras")]
class_weight = {0: 1.0 / counts[0], 1: 1.0 / counts[1]}
history = model.fit(
    train_features,
    train_targets,
    batch_size=256,
    epochs=4,
    verbose=0,
    callbacks=callbacks,
    validation_data=(val_features, val_targets),
    class_weight=class_weight,
)
assert {"fn", "fp", "tn", "tp", "precision", "recall", "val_recall"} <= set(history.history)
reloaded = keras.models.load_model("fraud_model_at_epoch_4.keras")
print("KERAS_SCRIPT_RESULT", json.dumps({"losses": [float(v) for v in history.history["loss"]]}))
