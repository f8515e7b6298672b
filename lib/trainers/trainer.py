"""The public training API mixed into `tp.Model`: compile, fit, evaluate, predict,
train_on_batch, test_on_batch, predict_on_batch, and the metrics they log.

The step itself (forward, loss, loss scaling, gradients, update; frozen into a graph by
default, as Keras's `run_eagerly=False`) is `tapeflow.trainers.train_step`; the data of
each call (argument checks, weights, batches, target checks) is one
`tapeflow.trainers.data_adapter.DataAdapter`.

Losses and metrics follow Keras 3: a loss with sample weights is sum(w * loss) / batch
size ("sum_over_batch_size"); the logged "loss" is the mean of the batch losses weighted
by batch size; a model with several outputs takes a loss (and loss weight, and metrics)
per output and logs "<output>_loss" and "<output>_<metric>" beside the total "loss".
The per-output bookkeeping is in `tapeflow.trainers.compile_losses` and
`tapeflow.trainers.compile_metrics`.

The distributed strategies use the model through `compute_loss`, `update_metrics`,
`reset_metrics` and `get_metrics_result` (Keras 3's names and arguments).

>>> import numpy as np
>>> import tapeflow as tp
>>> model = tp.Sequential([tp.Input((3,)), tp.layers.Dense(2)])
>>> model.compile("sgd", "sparse_categorical_crossentropy", metrics=["accuracy"])
>>> x, y = np.ones((6, 3), "float32"), np.array([0, 1, 1, 0, 1, 1])
>>> history = model.fit(x, y, sample_weight=np.ones(6), epochs=2, verbose=0)
>>> sorted(history.history), len(model.train_on_batch(x, y)), type(model.test_on_batch(x, y, return_dict=True))
(['accuracy', 'loss'], 2, <class 'dict'>)
"""

from __future__ import annotations

import numpy as np

from tapeflow import callbacks as callbacks_module
from tapeflow import dtypes, mixed_precision, tree
from tapeflow import metrics as metrics_module
from tapeflow import optimizers as optimizers_module
from tapeflow.data.dataset import Dataset
from tapeflow.tensor import Tensor
from tapeflow.trainers import data_adapter as data
from tapeflow.trainers.compile_losses import OutputLosses, per_output
from tapeflow.trainers.compile_metrics import OutputMetrics
from tapeflow.trainers.target_checks import TargetChecks
from tapeflow.trainers.train_step import Steps, compiled_loss


class Trainer:
    """compile / fit / evaluate / predict for a model whose `__call__(x, training)` runs it."""

    _compiled = False
    jit = "auto"  # an uncompiled model predicts with a frozen graph too
    _steps = None

    def compile(
        self,
        optimizer="rmsprop",
        loss=None,
        metrics=None,
        jit: bool | str = "auto",
        loss_weights=None,
        weighted_metrics=None,
    ) -> None:
        """Choose the optimizer, loss(es) and metrics (objects or Keras names), and whether
        to train and evaluate with frozen graphs or on the tape.

        Args:
            optimizer: a `tp.optimizers` Optimizer or its Keras name.
            loss: a loss, or for a model with several outputs a list (output order) or dict
                (by output name) of losses; None entries leave an output without one.
            metrics: a list of metrics; with several outputs, a list with one entry (a metric
                or a list) per output, or a dict by output name. They see no sample weights.
            jit: "auto" (the default) freezes the train and test steps into graphs and falls
                back to the tape, with a warning, for a model that cannot be frozen; True
                freezes them or fails; False runs them eagerly on the tape.
            loss_weights: the weight of each output's loss in the total: a list or dict like
                `loss` (a number for one output).
            weighted_metrics: metrics, in the form of `metrics`, that take the sample (and
                class) weights.

        Unlike Keras, `metrics` is the third positional argument (Keras has loss_weights there).

        >>> import tapeflow as tp
        >>> inputs = tp.Input((4,))
        >>> a, b = tp.layers.Dense(3, name="a")(inputs), tp.layers.Dense(1, name="b")(inputs)
        >>> model = tp.Model(inputs, [a, b])
        >>> model.compile("adam", loss={"a": "sparse_categorical_crossentropy", "b": "mse"},
        ...               loss_weights={"a": 1.0, "b": 0.5}, metrics={"a": ["accuracy"]})
        >>> model._output_losses.log_names, model._output_metrics.log_names
        (['a_loss', 'b_loss'], ['a_accuracy'])
        """
        if loss is None:
            raise ValueError("compile: a loss is required")
        self.optimizer = optimizers_module.get(optimizer)
        if mixed_precision.global_policy().compute_dtype is dtypes.float16 and not isinstance(
            self.optimizer, mixed_precision.LossScaleOptimizer
        ):  # float16 gradients underflow without loss scaling (as Keras wraps it)
            self.optimizer = mixed_precision.LossScaleOptimizer(self.optimizer)
        names = self._output_names_for(loss)
        self._output_losses = OutputLosses(loss, loss_weights, names)
        resolved = self._output_losses.losses
        self.loss = resolved[0] if len(resolved) == 1 else resolved
        self._output_metrics = OutputMetrics(metrics, weighted_metrics, names, resolved)
        self.compiled_metrics = self._output_metrics.metrics
        self._loss_tracker = metrics_module.Mean(name="loss")
        if jit not in (True, False, "auto"):
            raise ValueError(f"compile: jit must be True, False or 'auto', got {jit!r}")
        self.jit = jit
        self._steps = Steps(self)
        self._targets = TargetChecks(self._output_losses, self._output_specs)
        self._output_spec_cache = None
        self._compiled = True

    def _output_names_for(self, loss) -> list[str]:
        """The outputs' names: a functional model's own; otherwise one output unless the
        loss is a list ("output_1", ...) or a dict (its keys, in sorted order)."""
        names = getattr(self, "output_names", None)
        if names:
            return list(names)
        if isinstance(loss, list | tuple) and len(loss) > 1:
            return [f"output_{i + 1}" for i in range(len(loss))]
        if isinstance(loss, dict) and "class_name" not in loss and len(loss) > 1:
            return sorted(loss)
        return ["output"]

    # ------------------------------------------------------------------ steps
    def _check_compiled(self, method: str) -> None:
        if not self._compiled:
            raise RuntimeError(f"{method}: call model.compile(optimizer, loss) first")

    def compute_loss(self, x=None, y=None, y_pred=None, sample_weight=None, training: bool = True) -> Tensor:
        """The total loss of one batch, as Keras 3's `Model.compute_loss`: the compiled
        losses of every output, weighted, plus the layers' own losses."""
        return compiled_loss(self, y, y_pred, sample_weight)[0]

    def train_step(self, x, y, sample_weight=None) -> dict:
        """One update on one batch; returns the running loss and metric values."""
        y_pred, loss, values = self._step_runner().train(x, y, sample_weight)
        return self.update_metrics(y, y_pred, loss, sample_weight, values)

    def test_step(self, x, y, sample_weight=None) -> dict:
        """The loss and metrics of one batch, without an update; returns the running values."""
        y_pred, loss, values = self._step_runner().test(x, y, sample_weight)
        return self.update_metrics(y, y_pred, loss, sample_weight, values)

    def _step_runner(self) -> Steps:
        if self._steps is None:  # an uncompiled model predicts too
            self._steps = Steps(self)
        return self._steps

    def _frozen(self):
        """(train step, test step) as tp.functions, made on first use."""
        return self._step_runner().frozen()

    @property
    def _frozen_predict(self):
        """The frozen predict step, once predict has run one (else None)."""
        return None if self._steps is None else self._steps.frozen_predict

    def _output_specs(self, x) -> list[tuple]:
        """Each output's (shape without the batch axis, dtype), from one row of the inputs
        `x` through the model, once per compile (the target checks need the class count)."""
        if self._output_spec_cache is None:
            first_row = data.to_tensors(data.map_inputs(lambda a: a[:1], x))
            outputs = tree.flatten(self(first_row, training=False))
            self._output_spec_cache = [(tuple(out.shape[1:]), out.dtype.np) for out in outputs]
        return self._output_spec_cache

    def update_metrics(self, y, y_pred, loss, sample_weight=None, output_losses=None, batch_size=None) -> dict:
        """Add one batch to the loss (weighted by the batch size, as Keras does), the
        per-output losses and the metrics; returns the logs so far. The distributed
        strategies call it with the losses and predictions their replicas computed."""
        if batch_size is None and y_pred is not None:
            batch_size = int(tree.flatten(y_pred)[0].shape[0])
        self._loss_tracker.update_state(float(loss), sample_weight=batch_size)
        if output_losses:
            self._output_losses.update(output_losses, batch_size)
        if y is not None and y_pred is not None and self.compiled_metrics:
            names = self._output_losses.output_names
            weights = None if sample_weight is None else per_output(sample_weight, names, "sample_weight", "fit", True)
            self._output_metrics.update(per_output(y, names, "y", "fit"), tree.flatten(y_pred), weights)
        return self.get_metrics_result()

    def get_metrics_result(self) -> dict:
        """The loss and metric values so far, by log name, as Keras 3's method of this name."""
        logs = {"loss": self._loss_tracker.result()}
        logs.update(self._output_metrics.results())
        logs.update(self._output_losses.results())
        return logs

    def reset_metrics(self) -> None:
        """Start the loss and every metric over, as `fit` does at each epoch."""
        self._loss_tracker.reset_state()
        self._output_losses.reset()
        self._output_metrics.reset()

    def _keras_result(self, logs: dict, return_dict: bool):
        """Logs as Keras returns them from *_on_batch: a dict, or the values in Keras' order
        (loss, single-output metrics, per-output losses, then the rest sorted), or the loss
        alone when there is nothing else."""
        logs = {k: float(v) for k, v in logs.items()}
        if return_dict:
            return logs
        order = ["loss", *(m.name for m in self.compiled_metrics), *self._output_losses.log_names]
        order = list(dict.fromkeys(name for name in order if name in logs))
        order += sorted(set(logs) - set(order))
        values = [logs[name] for name in order]
        return values[0] if len(values) == 1 else values

    # -------------------------------------------------------------------- API
    def fit(
        self,
        x=None,
        y=None,
        batch_size: int | None = None,
        epochs: int = 1,
        verbose="auto",
        callbacks=None,
        validation_split: float = 0.0,
        validation_data=None,
        shuffle: bool = True,
        class_weight: dict | None = None,
        sample_weight=None,
        initial_epoch: int = 0,
        steps_per_epoch: int | None = None,
        validation_steps: int | None = None,
        validation_batch_size: int | None = None,
        seed: int | None = None,
        distribute=None,
    ):
        """Train for `epochs` passes over (x, y) or a Dataset of (x, y) or (x, y,
        sample_weight) batches; returns a History. The arguments are Keras 3's.

        Args:
            x: an array, a list of arrays (several inputs) or a `tp.data.Dataset`.
            y: the targets (a list or dict of arrays for several outputs); None with a Dataset.
            batch_size: samples per step for arrays (default 32).
            epochs: the index of the last epoch (an integer >= 0).
            validation_split: the fraction of the array data (cut from the end) to validate on.
            validation_data: (x, y), (x, y, sample_weight) or a Dataset, evaluated each epoch.
            shuffle: reshuffle the array data each epoch.
            class_weight: {class id: weight}, multiplied into the loss of each sample of that
                class (single output; not with sample_weight).
            sample_weight: one weight per sample (per output: a list or dict of them), as
                the loss's sample_weight: the batch loss is sum(w * loss) / batch size.
            initial_epoch: the epoch to start at (to resume).
            steps_per_epoch: batches per epoch; needed for an infinite Dataset. The pass over
                the data then carries on across epochs.
            validation_steps: batches per validation; needed for infinite validation data.
            validation_batch_size: batch size of array validation data (default `batch_size`).
            seed: the shuffle seed (tapeflow; None draws it from tp.random's global stream).
            distribute: a `tp.distributed` strategy (tapeflow), see below.

        Array data is shuffled afresh each epoch, in an order that depends only on (`seed`,
        epoch). A model not yet built is built on the first batch of array data before the
        callbacks start. In `on_train_begin` a callback may set `model._initial_epoch` (the
        epoch to start from) and `model._fit_seed` (the shuffle seed): that is how
        `tp.callbacks.BackupAndRestore` resumes an interrupted run exactly.

        `distribute` (a `tp.distributed` strategy) runs each epoch's steps on a cluster
        over the same batches in the same order: the strategy's `start(model, x, y,
        batch_size)` returns a session whose `run_epoch(batches, callbacks)` trains on
        batches of row numbers (or on the Dataset x) and returns the epoch's logs, and
        whose `close()` ends it; `model._fit_epoch` is the epoch being run. It takes
        neither sample nor class weights, steps, nor a model with several outputs.

        >>> import numpy as np
        >>> import tapeflow as tp
        >>> model = tp.Sequential([tp.Input((2,)), tp.layers.Dense(3)])
        >>> model.compile("sgd", tp.losses.SparseCategoricalCrossentropy(from_logits=True))
        >>> x, y = np.ones((8, 2), "float32"), np.arange(8) % 3
        >>> data = tp.data.Dataset.from_tensor_slices((x, y)).batch(4).repeat()
        >>> model.fit(data, epochs=2, steps_per_epoch=3, class_weight={0: 2.0}, verbose=0).epoch
        [0, 1]
        """
        self._check_compiled("fit")
        where = "fit"
        batch_size = data.count_argument(batch_size, "batch_size", where, default=32)
        epochs = data.count_argument(epochs, "epochs", where, minimum=0)
        initial_epoch = data.count_argument(initial_epoch, "initial_epoch", where, minimum=0)
        if initial_epoch > epochs:
            raise ValueError(
                f"fit: initial_epoch ({initial_epoch}) is past epochs ({epochs}): epochs is the index of the last "
                "epoch, not a count of epochs to run"
            )
        steps_per_epoch = data.count_argument(steps_per_epoch, "steps_per_epoch", where)
        validation_steps = data.count_argument(validation_steps, "validation_steps", where)
        validation_batch_size = data.count_argument(
            validation_batch_size, "validation_batch_size", where, default=batch_size
        )
        split = data.validation_fraction(validation_split, where)
        if distribute is not None:
            self._check_distributable("fit", class_weight, sample_weight, steps_per_epoch)
        train = data.DataAdapter(
            x,
            y,
            sample_weight,
            where=where,
            batch_size=batch_size,
            targets=self._targets,
            steps=steps_per_epoch,
            class_weight=class_weight,
            shuffle=shuffle,
            seed=seed,
            validation_split=split if validation_data is None else 0.0,
            for_strategy=distribute is not None,
        )
        validation = None
        if validation_data is None:
            validation_data = train.held_out
        if validation_data is not None:
            validation = data.DataAdapter(
                *data.validation_arguments(validation_data),
                where="fit: validation_data",
                batch_size=validation_batch_size,
                targets=self._targets,
                steps=validation_steps,
                steps_argument="validation_steps",
            )
        self._fit_seed = train.seed
        first_inputs = None if self.built else train.first_inputs()
        if first_inputs is not None:  # built now, so that callbacks (BackupAndRestore) see the weights
            self(first_inputs, training=False)
        session = None if distribute is None else distribute.start(self, *train.arrays, batch_size)
        try:
            history = callbacks_module.History()
            progress = callbacks_module.ProgbarLogger(verbose)
            cbs = callbacks_module.CallbackList(
                [*(callbacks or []), history, progress],
                self,
                {"epochs": epochs, "steps": train.steps, "verbose": verbose},
            )
            self.stop_training = False
            self._initial_epoch = None  # a callback restoring a checkpoint sets where to resume
            cbs.on_train_begin()
            if self._initial_epoch is not None:
                initial_epoch = self._initial_epoch
            if train.seed is not None:  # and the shuffle seed
                train.seed = self._fit_seed
            for epoch in range(initial_epoch, epochs):
                self._fit_epoch = epoch
                self.reset_metrics()
                cbs.on_epoch_begin(epoch)
                if session is not None:
                    logs = session.run_epoch(train.strategy_batches(epoch), cbs)
                else:
                    logs = {}
                    for step, (xb, yb, swb) in enumerate(train.epoch(epoch)):
                        cbs.on_train_batch_begin(step)
                        logs = self.train_step(xb, yb, swb)
                        cbs.on_train_batch_end(step, logs)
                logs = dict(logs)
                if validation is not None:
                    val = self._evaluate_batches(validation.epoch(epoch))
                    logs.update({f"val_{k}": v for k, v in val.items()})
                cbs.on_epoch_end(epoch, logs)
                if self.stop_training:
                    break
            cbs.on_train_end()
        finally:
            if session is not None:
                session.close()
            for opened in (train, validation):
                if opened is not None:
                    opened.close()
        return history

    def _check_distributable(self, where: str, class_weight, sample_weight, steps) -> None:
        steps_name = "steps_per_epoch" if where == "fit" else "steps"
        given = {"class_weight": class_weight, "sample_weight": sample_weight, steps_name: steps}
        given = [name for name, value in given.items() if value is not None]
        if given:
            raise ValueError(f"{where}: {', '.join(given)} cannot be combined with distribute= yet; run without it")
        if len(self._output_losses.output_names) > 1:
            raise ValueError(f"{where}: distribute= runs models with one output only")

    def _evaluate_batches(self, batches) -> dict:
        self.reset_metrics()
        logs = {}
        for xb, yb, swb in batches:
            logs = self.test_step(xb, yb, swb)
        return {k: float(v) for k, v in logs.items()}

    def evaluate(
        self,
        x=None,
        y=None,
        batch_size: int | None = None,
        verbose="auto",
        sample_weight=None,
        steps: int | None = None,
        return_dict: bool = True,
        class_weight: dict | None = None,
        distribute=None,
    ):
        """The loss and metrics over (x, y) or a Dataset of (x, y) or (x, y, sample_weight)
        batches, as a dict of floats.

        `sample_weight` weighs each sample's loss (and the weighted_metrics); `class_weight`
        (a tapeflow extension: Keras' evaluate has none) does so by class. `steps` caps
        the batches (needed for an infinite Dataset). Unlike Keras, a dict is the default;
        `return_dict=False` gives Keras' list (or the loss alone). With `distribute`, array
        inputs are split over the strategy's workers at batch boundaries: each runs the
        forward pass and loss of its batches, and the metrics are updated here, so the
        result equals evaluating in one process (a Dataset is evaluated here).

        >>> import numpy as np
        >>> import tapeflow as tp
        >>> model = tp.Sequential([tp.Input((2,)), tp.layers.Dense(1, kernel_initializer="zeros")])
        >>> model.compile("sgd", "mse")
        >>> model.evaluate(np.ones((4, 2)), np.ones(4), sample_weight=np.array([1.0, 1.0, 0.0, 0.0]), verbose=0)
        {'loss': 0.5}
        """
        self._check_compiled("evaluate")
        batch_size = data.count_argument(batch_size, "batch_size", "evaluate", default=32)
        steps = data.count_argument(steps, "steps", "evaluate")
        if distribute is not None and not isinstance(x, Dataset):
            self._check_distributable("evaluate", class_weight, sample_weight, steps)
            return self._keras_result(distribute.evaluate(self, x, y, batch_size), return_dict)
        batches = data.DataAdapter(
            x,
            y,
            sample_weight,
            where="evaluate",
            batch_size=batch_size,
            targets=self._targets,
            steps=steps,
            steps_argument="steps",
            class_weight=class_weight,
        )
        try:
            logs = self._evaluate_batches(batches.epoch(0))
        finally:
            batches.close()
        return self._keras_result(logs, return_dict)

    def predict(self, x, batch_size: int | None = None, verbose="auto", steps: int | None = None, distribute=None):
        """The model's outputs for `x`, batch by batch: one NumPy array, or a list (dict) of
        them for a model with several outputs. A Dataset may yield x alone or (x, y, ...)
        tuples, as in Keras; `steps` caps the batches. With `distribute`, array inputs are
        split over the strategy's workers, each running the model's inference graph on its
        part (a Dataset is predicted here)."""
        batch_size = data.count_argument(batch_size, "batch_size", "predict", default=32)
        steps = data.count_argument(steps, "steps", "predict")
        if distribute is not None and not isinstance(x, Dataset):
            return distribute.predict(self, x, batch_size)
        batches = data.DataAdapter(x, where="predict", batch_size=batch_size, steps=steps, steps_argument="steps")
        runner = self._step_runner()
        try:
            outputs = [runner.predict(xb) for xb, _, _ in batches.epoch(0)]
        finally:
            batches.close()
        return _concatenate(outputs)

    def train_on_batch(self, x, y=None, sample_weight=None, class_weight=None, return_dict: bool = False):
        """One update on one batch. Returns what Keras returns: the loss (a float) for a model
        without metrics, else a list (loss, then the metrics), or a dict with `return_dict`.

        >>> import numpy as np
        >>> import tapeflow as tp
        >>> model = tp.Sequential([tp.Input((2,)), tp.layers.Dense(1)])
        >>> model.compile("sgd", "mse")
        >>> isinstance(model.train_on_batch(np.ones((4, 2)), np.ones(4)), float)
        True
        """
        self._check_compiled("train_on_batch")
        batch = data.one_batch(x, y, sample_weight, "train_on_batch", self._targets, class_weight)
        self.reset_metrics()
        return self._keras_result(self.train_step(*batch), return_dict)

    def test_on_batch(self, x, y=None, sample_weight=None, return_dict: bool = False):
        """The loss and metrics of one batch, without an update, in train_on_batch's forms."""
        self._check_compiled("test_on_batch")
        batch = data.one_batch(x, y, sample_weight, "test_on_batch", self._targets)
        self.reset_metrics()
        return self._keras_result(self.test_step(*batch), return_dict)

    def predict_on_batch(self, x):
        """The model's outputs for one batch, as NumPy (a list or dict for several outputs).

        >>> import numpy as np
        >>> import tapeflow as tp
        >>> tp.Sequential([tp.Input((2,)), tp.layers.Dense(3)]).predict_on_batch(np.ones((4, 2))).shape
        (4, 3)
        """
        if isinstance(x, Dataset):
            raise TypeError("predict_on_batch: takes one batch of arrays, not a Dataset; use predict")
        arrays = data.array_data(x, None, None, "predict_on_batch")
        return _concatenate([self._step_runner().predict(data.to_tensors(arrays.x))])


def _concatenate(outputs: list):
    """Per-batch outputs (tensors, or lists or dicts of them) joined along the batch axis."""
    first = outputs[0]
    if isinstance(first, dict):
        return {k: np.concatenate([np.asarray(o[k]) for o in outputs]) for k in first}
    if isinstance(first, list | tuple):
        return [np.concatenate([np.asarray(o[i]) for o in outputs]) for i in range(len(first))]
    return np.concatenate([np.asarray(o) for o in outputs])
