"""The training loop: compile, fit, evaluate, predict, train_on_batch, test_on_batch,
and `BackupAndRestore`, the callback that resumes an interrupted fit.

`Trainer` is mixed into `tp.Model`. It knows nothing of backends: a training step is a
GradientTape around the model's forward pass and loss, then the optimizer's update.
Training runs eagerly on the tape by default; `compile(jit=True)` freezes the whole step
(forward, loss, gradients and optimizer update) into one graph over the model's Variables,
traced once per batch shape, with the learning rate and step number as graph inputs.
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
from tapeflow.ops.random import global_generator
from tapeflow.ops.registry import as_tensor
from tapeflow.tensor import Tensor


class Trainer:
    """compile / fit / evaluate / predict for a model whose `__call__(x, training)` runs it."""

    _compiled = False

    def compile(self, optimizer="rmsprop", loss=None, metrics=None, jit: bool = False) -> None:
        """Choose the optimizer, loss and metrics (objects or Keras names); with
        `jit=True`, train and evaluate with frozen graphs instead of the tape."""
        if loss is None:
            raise ValueError("compile: a loss is required")
        self.optimizer = optimizers_module.get(optimizer)
        self.loss = losses_module.get(loss)
        self.compiled_metrics = [metrics_module.get(m, loss=self.loss) for m in (metrics or [])]
        self._loss_tracker = metrics_module.Mean(name="loss")
        self.jit = bool(jit)
        self._frozen_steps = None
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
        if getattr(self, "jit", False):
            return self._frozen_train_step(x, y)
        with GradientTape() as tape:
            y_pred = self(x, training=True)
            loss = self._total_loss(y, y_pred)
        variables = self.trainable_weights
        grads = tape.gradient(loss, variables)
        self.optimizer.apply_gradients(zip(grads, variables, strict=True))
        return self._update_metrics(y, y_pred, loss)

    def test_step(self, x, y) -> dict:
        if getattr(self, "jit", False):
            y_pred, loss = self._frozen()[1](x, y)
            return self._update_metrics(y, y_pred, loss)
        y_pred = self(x, training=False)
        return self._update_metrics(y, y_pred, self._total_loss(y, y_pred))

    # ------------------------------------------------------------ frozen steps
    def _frozen(self):
        """(train step, test step) as tp.functions, made on first use."""
        if self._frozen_steps is None:
            from tapeflow.graph.function import Function

            def train(x, y, learning_rate, step):
                with GradientTape() as tape:
                    y_pred = self(x, training=True)
                    loss = self._total_loss(y, y_pred)
                variables = self.trainable_weights
                grads = tape.gradient(loss, variables)
                self.optimizer.apply_gradients_at(zip(grads, variables, strict=True), learning_rate, step)
                return y_pred, loss

            def test(x, y):
                y_pred = self(x, training=False)
                return y_pred, self._total_loss(y, y_pred)

            self._frozen_steps = (Function(train), Function(test))
        return self._frozen_steps

    def _frozen_train_step(self, x, y) -> dict:
        if not self.built:
            self(x, training=False)
        variables = self.trainable_weights
        self.optimizer.build(variables)
        dtype = variables[0].dtype if variables else "float32"
        lr = as_tensor(float(self.optimizer.learning_rate), dtype=dtype)
        step = as_tensor(float(self.optimizer.iterations + 1), dtype=dtype)
        y_pred, loss = self._frozen()[0](x, y, lr, step)
        self.optimizer.iterations += 1
        return self._update_metrics(y, y_pred, loss)

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
    def _arrays(x, y, name):
        """(x, y) as NumPy arrays of equal length (y may be None); x a tuple of arrays
        for a model with several inputs."""
        if isinstance(x, list | tuple):
            xs = tuple(_as_array(a) for a in x)
            lengths = [len(a) for a in xs]
            if len(set(lengths)) > 1:
                raise ValueError(f"{name}: the {len(xs)} inputs have different sample counts {lengths}")
        else:
            xs = _as_array(x)
        if y is None:
            return xs, None
        ys = _as_array(y)
        if _count(xs) != len(ys):
            raise ValueError(f"{name}: x has {_count(xs)} samples but y has {len(ys)}")
        return xs, ys

    def _batches(self, x, y, batch_size, name) -> Dataset:
        """A Dataset of (x, y) batches in order from arrays, or the given Dataset as it is."""
        if isinstance(x, Dataset):
            if y is not None:
                raise ValueError(f"{name}: pass y inside the dataset, not separately")
            return x
        xs, ys = self._arrays(x, y, name)
        return Dataset.from_tensor_slices(xs if ys is None else (xs, ys)).batch(batch_size)

    def _epoch_batches(self, x, y, batch_size, shuffle, seed):
        """fit's data: a function from the epoch number to that epoch's batches.

        Arrays are shuffled per epoch with a seed derived from (`self._fit_seed`, epoch)
        alone, so an epoch's order never depends on the epochs run before it in this
        process: a run resumed from a checkpoint (which stores the base seed) reshuffles
        exactly as the uninterrupted run did. A Dataset is used as it is every epoch.
        """
        self._fit_seed = None
        if isinstance(x, Dataset) or not shuffle:
            batches = self._batches(x, y, batch_size, "fit")
            return lambda epoch: batches
        xs, ys = self._arrays(x, y, "fit")
        if seed is None:
            seed = int(global_generator().numpy.integers(2**63))
        if isinstance(seed, bool) or not isinstance(seed, int | np.integer) or seed < 0:
            raise ValueError(f"fit: seed must be None or an integer >= 0, got {seed!r}")
        self._fit_seed = int(seed)
        elements = Dataset.from_tensor_slices(xs if ys is None else (xs, ys))

        def batches(epoch):
            seed = _epoch_seed(self._fit_seed, epoch)
            return elements.shuffle(_count(xs), seed=seed, reshuffle_each_iteration=False).batch(batch_size)

        return batches

    @staticmethod
    def _split(x, y, fraction: float):
        if not 0.0 < fraction < 1.0:
            raise ValueError(f"fit: validation_split must be in (0, 1), got {fraction}")
        xs, ys = Trainer._arrays(x, y, "fit")
        cut = int(math.floor(len(ys) * (1.0 - fraction)))
        return (_rows(xs, slice(None, cut)), ys[:cut]), (_rows(xs, slice(cut, None)), ys[cut:])

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
        validation_batch_size: int | None = None,
        distribute=None,
    ):
        """Train for `epochs` passes over (x, y) or a Dataset of (x, y) batches; returns a History.

        Array data is shuffled afresh each epoch, in an order that depends only on (`seed`,
        epoch); `seed=None` draws the seed from tp.random's global stream. A model not yet
        built is built on the first batch of array data before the callbacks start. In
        `on_train_begin` a callback may set `model._initial_epoch` (the epoch to start
        from) and `model._fit_seed` (the shuffle seed): that is how
        `tp.callbacks.BackupAndRestore` resumes an interrupted run exactly. `x` may be a list
        of arrays for a model with several inputs; `validation_batch_size` defaults to
        `batch_size`.

        `distribute` (a `tp.distributed` strategy) runs each epoch's steps on a cluster
        over the same batches in the same order: the strategy's `start(model, x, y,
        batch_size)` returns a session whose `run_epoch(batches, callbacks)` trains on
        batches of row numbers (or on the Dataset x) and returns the epoch's logs, and
        whose `close()` ends it; `model._fit_epoch` is the epoch being run.
        """
        self._check_compiled("fit")
        if validation_split and validation_data is None:
            if isinstance(x, Dataset):
                raise ValueError("fit: validation_split needs arrays, not a Dataset")
            (x, y), validation_data = self._split(x, y, validation_split)
        if distribute is None:
            train = self._epoch_batches(x, y, batch_size, shuffle, seed)
        elif isinstance(x, Dataset):
            if y is not None:
                raise ValueError("fit: with a Dataset x, y must be None (the Dataset yields (x, y) batches)")
            arrays, dataset = (x, None), x

            def train(epoch):  # the session makes each epoch's pass itself
                return dataset

        else:
            if y is None:
                raise ValueError("fit: distribute= with arrays needs y")
            arrays = self._arrays(x, y, "fit")
            train = self._epoch_batches(np.arange(len(arrays[1])), None, batch_size, shuffle, seed)  # row numbers
        try:
            steps = len(train(initial_epoch))
        except TypeError:
            steps = None
        if not self.built and not isinstance(x, Dataset):  # so callbacks (BackupAndRestore) see the weights
            self(_inputs(_rows(self._arrays(x, None, "fit")[0], slice(None, batch_size))), training=False)
        session = None if distribute is None else distribute.start(self, *arrays, batch_size)
        try:
            history = callbacks_module.History()
            progress = callbacks_module.ProgbarLogger(verbose)
            cbs = callbacks_module.CallbackList(
                [*(callbacks or []), history, progress], self, {"epochs": epochs, "steps": steps, "verbose": verbose}
            )
            self.stop_training = False
            self._initial_epoch = None  # a callback restoring a checkpoint sets where to resume
            cbs.on_train_begin()
            if self._initial_epoch is not None:
                initial_epoch = self._initial_epoch
            for epoch in range(initial_epoch, epochs):
                self._fit_epoch = epoch
                self._reset_metrics()
                cbs.on_epoch_begin(epoch)
                if session is not None:
                    logs = session.run_epoch(train(epoch), cbs)
                else:
                    logs = {}
                    for step, (xb, yb) in enumerate(train(epoch)):
                        cbs.on_train_batch_begin(step)
                        logs = self.train_step(_inputs(xb), as_tensor(yb))
                        cbs.on_train_batch_end(step, logs)
                logs = dict(logs)
                if validation_data is not None:
                    val_batch = validation_batch_size or batch_size
                    val = self.evaluate(*_pair(validation_data), batch_size=val_batch, verbose=0)
                    logs.update({f"val_{k}": v for k, v in val.items()})
                cbs.on_epoch_end(epoch, logs)
                if self.stop_training:
                    break
            cbs.on_train_end()
        finally:
            if session is not None:
                session.close()
        return history

    def evaluate(self, x=None, y=None, batch_size: int = 32, verbose="auto", distribute=None) -> dict:
        """The loss and metrics over (x, y), as a dict of floats. With `distribute`, array
        inputs are split over the strategy's workers at batch boundaries: each runs the
        forward pass and loss of its batches, and the metrics are updated here, so the
        result equals evaluating in one process (a Dataset is evaluated here)."""
        self._check_compiled("evaluate")
        if distribute is not None and not isinstance(x, Dataset):
            return distribute.evaluate(self, x, y, batch_size)
        self._reset_metrics()
        logs = {}
        for xb, yb in self._batches(x, y, batch_size, "evaluate"):
            logs = self.test_step(_inputs(xb), as_tensor(yb))
        return {k: float(v) for k, v in logs.items()}

    def predict(self, x, batch_size: int = 32, verbose="auto", distribute=None) -> np.ndarray:
        """The model's outputs for `x`, batch by batch, as one NumPy array. With `distribute`,
        array inputs are split over the strategy's workers, each running the model's
        inference graph on its part (a Dataset is predicted here)."""
        if distribute is not None and not isinstance(x, Dataset):
            return distribute.predict(self, x, batch_size)
        outputs = [self(_inputs(xb), training=False).numpy() for xb in self._batches(x, None, batch_size, "predict")]
        return np.concatenate(outputs) if outputs else np.zeros((0,))

    def train_on_batch(self, x, y) -> dict:
        """One update on one batch; returns the loss and metrics of that batch."""
        self._check_compiled("train_on_batch")
        self._reset_metrics()
        return {k: float(v) for k, v in self.train_step(_inputs(x), as_tensor(y)).items()}

    def test_on_batch(self, x, y) -> dict:
        self._check_compiled("test_on_batch")
        self._reset_metrics()
        return {k: float(v) for k, v in self.test_step(_inputs(x), as_tensor(y)).items()}


def _as_array(a) -> np.ndarray:
    return a.numpy() if isinstance(a, Tensor) else np.asarray(a)


def _count(xs) -> int:
    """Samples in an array, or in each array of a tuple of inputs."""
    return len(xs[0]) if isinstance(xs, tuple) else len(xs)


def _rows(xs, rows: slice):
    return tuple(a[rows] for a in xs) if isinstance(xs, tuple) else xs[rows]


def _inputs(xb):
    """A batch of inputs as a tensor, or a list of tensors for a model with several inputs."""
    return [as_tensor(a) for a in xb] if isinstance(xb, list | tuple) else as_tensor(xb)


def _epoch_seed(base: int, epoch: int) -> int:
    """The shuffle seed of one epoch: a function of (base seed, epoch) only."""
    return int(np.random.SeedSequence([base, epoch]).generate_state(1, np.uint64)[0]) >> 1


def _pair(data):
    if isinstance(data, Dataset):
        return data, None
    if isinstance(data, tuple | list) and len(data) == 2:
        return data[0], data[1]
    raise ValueError("fit: validation_data must be (x, y) or a Dataset")
