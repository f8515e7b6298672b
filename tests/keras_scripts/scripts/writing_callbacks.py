# Exercises keras.io guide "Writing your own callbacks".
import json

import numpy as np

import tapeflow as keras

calls = []


def get_model():
    model = keras.Sequential([keras.Input((16,)), keras.layers.Dense(1)])
    model.compile(
        optimizer=keras.optimizers.RMSprop(learning_rate=0.05),
        loss="mean_squared_error",
        metrics=["mean_absolute_error"],
    )
    return model


class CustomCallback(keras.callbacks.Callback):
    def on_train_begin(self, logs=None):
        calls.append("train_begin")

    def on_train_end(self, logs=None):
        calls.append("train_end")

    def on_epoch_begin(self, epoch, logs=None):
        calls.append("epoch_begin")

    def on_epoch_end(self, epoch, logs=None):
        calls.append("epoch_end")

    def on_test_begin(self, logs=None):
        calls.append("test_begin")

    def on_test_end(self, logs=None):
        calls.append("test_end")

    def on_predict_begin(self, logs=None):
        calls.append("predict_begin")

    def on_predict_end(self, logs=None):
        calls.append("predict_end")

    def on_train_batch_end(self, batch, logs=None):
        calls.append("train_batch_end")


class LossAndErrorPrintingCallback(keras.callbacks.Callback):
    def on_epoch_end(self, epoch, logs=None):
        print(f"Epoch {epoch}: loss {logs['loss']:7.2f}, mae {logs['mean_absolute_error']:7.2f}")


class EarlyStoppingAtMinLoss(keras.callbacks.Callback):
    """Stops when the loss stops falling, and restores the best weights."""

    def __init__(self, patience=0):
        super().__init__()
        self.patience = patience
        self.best_weights = None

    def on_train_begin(self, logs=None):
        self.wait = 0
        self.stopped_epoch = 0
        self.best = np.inf

    def on_epoch_end(self, epoch, logs=None):
        current = logs.get("loss")
        if np.less(current, self.best):
            self.best = current
            self.wait = 0
            self.best_weights = self.model.get_weights()
        else:
            self.wait += 1
            if self.wait >= self.patience:
                self.stopped_epoch = epoch
                self.model.stop_training = True
                self.model.set_weights(self.best_weights)


class CustomLearningRateScheduler(keras.callbacks.Callback):
    def __init__(self, schedule):
        super().__init__()
        self.schedule = schedule

    def on_epoch_begin(self, epoch, logs=None):
        lr = self.model.optimizer.learning_rate
        scheduled_lr = self.schedule(epoch, lr)
        self.model.optimizer.learning_rate = scheduled_lr


def lr_schedule(epoch, lr):
    return float(lr) * 0.5 if epoch >= 2 else lr


rng = np.random.default_rng(0)
x_train = rng.random((128, 16)).astype("float32")
y_train = x_train[:, :4].sum(axis=1)

model = get_model()
model.fit(x_train, y_train, batch_size=64, epochs=1, verbose=0, validation_split=0.5, callbacks=[CustomCallback()])
model.evaluate(x_train, y_train, batch_size=64, verbose=0, callbacks=[CustomCallback()])
model.predict(x_train, batch_size=64, verbose=0, callbacks=[CustomCallback()])
assert calls[:2] == ["train_begin", "epoch_begin"] and "test_begin" in calls and calls[-1] == "predict_end", calls

model = get_model()
history = model.fit(
    x_train,
    y_train,
    batch_size=32,
    epochs=4,
    verbose=0,
    callbacks=[
        LossAndErrorPrintingCallback(),
        EarlyStoppingAtMinLoss(patience=2),
        CustomLearningRateScheduler(lr_schedule),
    ],
)
assert abs(float(model.optimizer.learning_rate) - 0.0125) < 1e-6, model.optimizer.learning_rate
print("KERAS_SCRIPT_RESULT", json.dumps({"losses": [float(v) for v in history.history["loss"]]}))
