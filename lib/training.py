"""The training loop: compile, fit, evaluate, predict, train_on_batch, test_on_batch.

`Trainer` is mixed into `tp.Model`. It knows nothing of backends: a training step is a
GradientTape around the model's forward pass and loss, then the optimizer's update.
Training runs eagerly on the tape (graph-mode training comes with `compile(jit=True)`).
"""

from __future__ import annotations

import math

import numpy as np

from tapeflow import callbacks as callbacks_module
from tapeflow import losses as losses_module
from tapeflow import metrics as metrics_module
from tapeflow import optimizers as optimizers_module
from tapeflow.autodiff import GradientTape
from tapeflow.data.dataset import Dataset
from tapeflow.ops.math import add
from tapeflow.ops.registry import as_tensor
from tapeflow.tensor import Tensor


class Trainer:
    """compile / fit / evaluate / predict for a model whose `__call__(x, training)` runs it."""

    _compiled = False

    def compile(self, optimizer="rmsprop", loss=None, metrics=None, jit: bool = False) -> None:
        """Choose the optimizer, loss and metrics (objects or Keras names)."""
        if jit:
            raise NotImplementedError("compile(jit=True): graph-mode training is not available yet")
        if loss is None:
            raise ValueError("compile: a loss is required")
        self.optimizer = optimizers_module.get(optimizer)
        self.loss = losses_module.get(loss)
        self.compiled_metrics = [metrics_module.get(m, loss=self.loss) for m in (metrics or [])]
        self._loss_tracker = metrics_module.Mean(name="loss")
        self._compiled = True

    # ------------------------------------------------------------------ steps
    def _check_compiled(self, method: str) -> None:
        if not self._compiled:
            raise RuntimeError(f"{method}: call model.compile(optimizer, loss) first")

    def _total_loss(self, y, y_pred) -> Tensor:
        loss = self.loss(y, y_pred)
        for extra in self.losses:
            loss = add(loss, extra)
        return loss

    def train_step(self, x, y) -> dict:
        """One update on one batch; returns the running loss and metric values."""
        with GradientTape() as tape:
            y_pred = self(x, training=True)
            loss = self._total_loss(y, y_pred)
        variables = self.trainable_weights
        grads = tape.gradient(loss, variables)
        self.optimizer.apply_gradients(zip(grads, variables, strict=True))
        return self._update_metrics(y, y_pred, loss)

    def test_step(self, x, y) -> dict:
        y_pred = self(x, training=False)
        return self._update_metrics(y, y_pred, self._total_loss(y, y_pred))

    def _update_metrics(self, y, y_pred, loss) -> dict:
        self._loss_tracker.update_state(loss)
        for metric in self.compiled_metrics:
            metric.update_state(y, y_pred)
        return self._metric_results()

    def _metric_results(self) -> dict:
        logs = {"loss": self._loss_tracker.result()}
        for metric in self.compiled_metrics:
            logs[metric.name] = metric.result()
        return logs

    def _reset_metrics(self) -> None:
        self._loss_tracker.reset_state()
        for metric in self.compiled_metrics:
            metric.reset_state()

    # ------------------------------------------------------------------- data
    @staticmethod
    def _batches(x, y, batch_size, shuffle, seed, name):
        """A Dataset of (x, y) batches from arrays, or the given Dataset as it is."""
        if isinstance(x, Dataset):
            if y is not None:
                raise ValueError(f"{name}: pass y inside the dataset, not separately")
            return x
        xs = np.asarray(x) if not isinstance(x, Tensor) else x.numpy()
        if y is None:
            data = Dataset.from_tensor_slices(xs)
        else:
            ys = np.asarray(y) if not isinstance(y, Tensor) else y.numpy()
            if len(xs) != len(ys):
                raise ValueError(f"{name}: x has {len(xs)} samples but y has {len(ys)}")
            data = Dataset.from_tensor_slices((xs, ys))
        if shuffle:
            data = data.shuffle(len(xs), seed=seed)
        return data.batch(batch_size)

    @staticmethod
    def _split(x, y, fraction: float):
        if not 0.0 < fraction < 1.0:
            raise ValueError(f"fit: validation_split must be in (0, 1), got {fraction}")
        xs, ys = np.asarray(x), np.asarray(y)
        cut = int(math.floor(len(xs) * (1.0 - fraction)))
        return (xs[:cut], ys[:cut]), (xs[cut:], ys[cut:])

    # -------------------------------------------------------------------- API
    def fit(
        self,
        x=None,
        y=None,
        batch_size: int = 32,
        epochs: int = 1,
        verbose="auto",
        callbacks=None,
        validation_split: float = 0.0,
        validation_data=None,
        shuffle: bool = True,
        initial_epoch: int = 0,
        seed: int | None = None,
    ):
        """Train for `epochs` passes over (x, y) or a Dataset of (x, y) batches; returns a History."""
        self._check_compiled("fit")
        if validation_split and validation_data is None:
            if isinstance(x, Dataset):
                raise ValueError("fit: validation_split needs arrays, not a Dataset")
            (x, y), validation_data = self._split(x, y, validation_split)
        train = self._batches(x, y, batch_size, shuffle, seed, "fit")
        try:
            steps = len(train)
        except TypeError:
            steps = None
        history = callbacks_module.History()
        progress = callbacks_module.ProgbarLogger(verbose)
        cbs = callbacks_module.CallbackList(
            [*(callbacks or []), history, progress], self, {"epochs": epochs, "steps": steps, "verbose": verbose}
        )
        self.stop_training = False
        cbs.on_train_begin()
        for epoch in range(initial_epoch, epochs):
            self._reset_metrics()
            cbs.on_epoch_begin(epoch)
            logs = {}
            for step, (xb, yb) in enumerate(train):
                cbs.on_train_batch_begin(step)
                logs = self.train_step(as_tensor(xb), as_tensor(yb))
                cbs.on_train_batch_end(step, logs)
            logs = dict(logs)
            if validation_data is not None:
                val = self.evaluate(*_pair(validation_data), batch_size=batch_size, verbose=0)
                logs.update({f"val_{k}": v for k, v in val.items()})
            cbs.on_epoch_end(epoch, logs)
            if self.stop_training:
                break
        cbs.on_train_end()
        return history

    def evaluate(self, x=None, y=None, batch_size: int = 32, verbose="auto") -> dict:
        """The loss and metrics over (x, y), as a dict of floats."""
        self._check_compiled("evaluate")
        self._reset_metrics()
        logs = {}
        for xb, yb in self._batches(x, y, batch_size, False, None, "evaluate"):
            logs = self.test_step(as_tensor(xb), as_tensor(yb))
        return {k: float(v) for k, v in logs.items()}

    def predict(self, x, batch_size: int = 32, verbose="auto") -> np.ndarray:
        """The model's outputs for `x`, batch by batch, as one NumPy array."""
        outputs = [
            self(as_tensor(xb), training=False).numpy()
            for xb in self._batches(x, None, batch_size, False, None, "predict")
        ]
        return np.concatenate(outputs) if outputs else np.zeros((0,))

    def train_on_batch(self, x, y) -> dict:
        """One update on one batch; returns the loss and metrics of that batch."""
        self._check_compiled("train_on_batch")
        self._reset_metrics()
        return {k: float(v) for k, v in self.train_step(as_tensor(x), as_tensor(y)).items()}

    def test_on_batch(self, x, y) -> dict:
        self._check_compiled("test_on_batch")
        self._reset_metrics()
        return {k: float(v) for k, v in self.test_step(as_tensor(x), as_tensor(y)).items()}


def _pair(data):
    if isinstance(data, Dataset):
        return data, None
    if isinstance(data, tuple | list) and len(data) == 2:
        return data[0], data[1]
    raise ValueError("fit: validation_data must be (x, y) or a Dataset")
