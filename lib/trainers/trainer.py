"""The public training API mixed into `tp.Model`: compile, fit, evaluate, predict,
train_on_batch, test_on_batch, predict_on_batch, and the metrics they log.

The built-in step (forward, `compute_loss`, loss scaling, gradients, update; frozen into a
graph by default) is `tapeflow.trainers.train_step`; a user's own `train_step(data)`,
`test_step(data)` or `predict_step(data)` runs through `tapeflow.trainers.custom_step`,
frozen when it can be, as Keras 3's `jit_compile="auto"` does. The data of each call
(argument checks, weights, batches, target checks) is one
`tapeflow.trainers.data_adapter.DataAdapter`.

Losses and metrics follow Keras 3: a loss with sample weights is sum(w * loss) / batch
size ("sum_over_batch_size"); the logged "loss" is the mean of the batch losses weighted
by batch size; a model with several outputs takes a loss (and loss weight, and metrics)
per output and logs "<output>_loss" and "<output>_<metric>" beside the total "loss".
The per-output bookkeeping is in `tapeflow.trainers.compile_losses` and
`tapeflow.trainers.compile_metrics`. `model.metrics` holds the loss tracker, the compiled
metrics and the model's own Metric attributes, which `fit` and `evaluate` reset.

The distributed strategies use the model through `compute_loss`, `update_metrics`,
`reset_metrics` and `get_metrics_result` (Keras 3's names and arguments).

>>> import numpy as np
>>> import tapeflow as tp
>>> model = tp.Sequential([tp.Input((3,)), tp.layers.Dense(2)])
>>> model.compile("sgd", "sparse_categorical_crossentropy", metrics=["accuracy"])
>>> x, y = np.ones((6, 3), "float32"), np.array([0, 1, 1, 0, 1, 1])
>>> history = model.fit(x, y, sample_weight=np.ones(6), epochs=2, verbose=0)
>>> sorted(history.history), model.metrics_names, len(model.evaluate(x, y, verbose=0))
(['accuracy', 'loss'], ['loss', 'accuracy'], 2)
"""

from __future__ import annotations

import contextlib
import warnings

import numpy as np

from tapeflow import callbacks as callbacks_module
from tapeflow import dtypes, mixed_precision, profiler, tree
from tapeflow import metrics as metrics_module
from tapeflow import optimizers as optimizers_module
from tapeflow.backends.common import deferring_checks
from tapeflow.data.dataset import Dataset
from tapeflow.layers.base import Layer, layers_in
from tapeflow.metrics.metric import Metric
from tapeflow.queue.queues import QueueBase
from tapeflow.tensor import FreezeError, Tensor
from tapeflow.trainers import data_adapter as data
from tapeflow.trainers.compile_losses import OutputLosses, per_output
from tapeflow.trainers.compile_metrics import OutputMetrics
from tapeflow.trainers.custom_step import FrozenStep, accepts
from tapeflow.trainers.data_adapter import pack_x_y_sample_weight, unpack_x_y_sample_weight
from tapeflow.trainers.target_checks import TargetChecks
from tapeflow.trainers.train_step import Steps, compiled_loss

_STEPS = ("train_step", "test_step", "predict_step")


class Trainer:
    """compile / fit / evaluate / predict for a model whose `__call__(x, training)` runs it."""

    _compiled = False
    jit = "auto"  # an uncompiled model predicts with a frozen graph too
    _steps = None
    _output_losses = None
    _loss_tracker = None
    _custom_steps = None
    _held = None  # (metrics, their log names, weights, Metric attributes) while a run of steps holds them
    steps_per_execution = 1

    def compile(
        self,
        optimizer="rmsprop",
        loss=None,
        metrics=None,
        loss_weights=None,
        weighted_metrics=None,
        run_eagerly: bool = False,
        steps_per_execution: int = 1,
        jit_compile: bool | str = "auto",
        auto_scale_loss: bool = True,
        jit: bool | str | None = None,
    ) -> None:
        """Choose the optimizer, loss(es) and metrics (objects or Keras names), and whether
        to train and evaluate with frozen graphs or on the tape. The arguments are Keras 3's.

        Args:
            optimizer: a `tp.optimizers` Optimizer or its Keras name.
            loss: a loss, or for a model with several outputs a list (output order) or dict
                (by output name) of losses; None entries leave an output without one. None
                (the default) for a model whose loss comes from `add_loss`, or an override of
                `compute_loss` or `train_step`.
            metrics: a list of metrics; with several outputs, a list with one entry (a metric
                or a list) per output, or a dict by output name. They see no sample weights.
            loss_weights: the weight of each output's loss in the total: a list or dict like
                `loss` (a number for one output).
            weighted_metrics: metrics, in the form of `metrics`, that take the sample (and
                class) weights.
            run_eagerly: run every step on the tape (jit_compile then is False).
            steps_per_execution: steps per call of the step function; only 1 (as on Keras'
                torch backend).
            jit_compile: "auto" (the default) freezes the train, test and predict steps (a
                custom `train_step` too) into graphs and falls back to the tape, with a
                warning, for a step that cannot be frozen; True freezes them or fails; False
                runs them eagerly on the tape.
            auto_scale_loss: under the "mixed_float16" policy, wrap the optimizer in a
                `LossScaleOptimizer` (as Keras does).
            jit: tapeflow's name for `jit_compile`.

        Unlike Keras, `metrics` is the third positional argument (Keras has loss_weights there).

        >>> import tapeflow as tp
        >>> inputs = tp.Input((4,))
        >>> a, b = tp.layers.Dense(3, name="a")(inputs), tp.layers.Dense(1, name="b")(inputs)
        >>> model = tp.Model(inputs, [a, b])
        >>> model.compile("adam", loss={"a": "sparse_categorical_crossentropy", "b": "mse"},
        ...               loss_weights={"a": 1.0, "b": 0.5}, metrics={"a": ["accuracy"]})
        >>> model.metrics_names
        ['loss', 'a_loss', 'b_loss', 'a_accuracy']
        """
        jit = _jit_setting(jit_compile, jit, run_eagerly)
        if isinstance(steps_per_execution, bool) or not isinstance(steps_per_execution, int | np.integer):
            raise ValueError(f"compile: steps_per_execution must be an integer >= 1, got {steps_per_execution!r}")
        if steps_per_execution != 1:
            raise ValueError(
                f"compile: steps_per_execution must be 1 (one step per call, as on Keras' torch backend), got "
                f"{steps_per_execution!r}"
            )
        self.optimizer = optimizers_module.get(optimizer)
        float16 = mixed_precision.global_policy().compute_dtype is dtypes.float16
        if auto_scale_loss and float16 and not isinstance(self.optimizer, mixed_precision.LossScaleOptimizer):
            # float16 gradients underflow without loss scaling (as Keras wraps it)
            self.optimizer = mixed_precision.LossScaleOptimizer(self.optimizer)
        names = self._output_names_for(loss)
        self._output_losses = OutputLosses(loss, loss_weights, names)
        resolved = self._output_losses.losses
        self.loss = resolved[0] if len(resolved) == 1 else resolved
        self._output_metrics = OutputMetrics(metrics, weighted_metrics, names, resolved)
        self.compiled_metrics = self._output_metrics.metrics
        self._loss_tracker = metrics_module.Mean(name="loss")
        self.jit = jit
        self.steps_per_execution = 1
        self._held = None
        self._steps = Steps(self)
        self._custom_steps = {}
        self._targets = TargetChecks(self._output_losses, self._output_specs)
        self._output_spec_cache = None
        self._compiled = True

    @property
    def jit_compile(self) -> bool | str:
        """Keras 3's name for `jit`: True, False or "auto"."""
        return self.jit

    @jit_compile.setter
    def jit_compile(self, value) -> None:
        self.jit = _jit_setting(value, None, False)
        self._steps = self._custom_steps = None

    @property
    def run_eagerly(self) -> bool:
        """Whether the steps run on the tape (`jit` is False)."""
        return self.jit is False

    @run_eagerly.setter
    def run_eagerly(self, value: bool) -> None:
        self.jit_compile = False if value else "auto"

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

    # ---------------------------------------------------------------- metrics
    @property
    def metrics(self) -> list[Metric]:
        """The metrics `fit` and `evaluate` log and reset, in Keras 3's order: the loss
        tracker, the compiled metrics, each output's loss tracker, then the Metric
        attributes of the model and of the layers it holds (a nested model's are its own).

        >>> import tapeflow as tp
        >>> class Tracked(tp.Model):
        ...     def __init__(self):
        ...         super().__init__()
        ...         self.dense = tp.layers.Dense(1)
        ...         self.total = tp.metrics.Mean(name="total")
        ...     def call(self, x):
        ...         return self.dense(x)
        >>> model = Tracked()
        >>> model.compile("sgd", "mse", metrics=["mae"])
        >>> [m.name for m in model.metrics]
        ['loss', 'mae', 'total']
        """
        if self._held is not None:
            return list(self._held[0])
        return self._metrics_among(_tracked_metrics(self))

    def _metrics_among(self, tracked: list[Metric]) -> list[Metric]:
        """`metrics`, given the Metric attributes of the model and its layers."""
        own: list[Metric] = []
        if self._compiled:
            own = [self._loss_tracker, *self._output_metrics.metrics, *self._output_losses.trackers]
        seen = {id(m) for m in own}
        for metric in tracked:
            if id(metric) not in seen:
                seen.add(id(metric))
                own.append(metric)
        return own

    @property
    def metrics_names(self) -> list[str]:
        """The logged names of `metrics`, in the order of `evaluate`'s list (so that
        `dict(zip(model.metrics_names, model.evaluate(x, y)))` pairs them up)."""
        return self._in_keras_order(self._log_names())

    def _log_names(self) -> list[str]:
        """The name each of `metrics` logs under, in `metrics` order."""
        if self._held is not None:
            return list(self._held[1])
        return self._log_names_of(self.metrics)

    def _log_names_of(self, metrics: list[Metric]) -> list[str]:
        names = {id(m): m.name for m in metrics}
        if self._compiled:
            compiled = [*self._output_metrics.metrics, *self._output_losses.trackers]
            logged = [*self._output_metrics.log_names, *self._output_losses.log_names]
            names.update(zip(map(id, compiled), logged, strict=True))
        return list(names.values())

    @contextlib.contextmanager
    def _holding_metrics(self, hold: bool = True):
        """Within it (with `hold`), `metrics`, their log names and the weights are those
        found on entry: the walk over the model's layers runs once rather than at every
        step. A loop of steps holds them once the model is built, as they then stay the
        same (a weight made (un)trainable meanwhile still counts: `_trainable_now`)."""
        previous = self._held
        if hold:
            self._held = None
            tracked = _tracked_metrics(self)
            self._held = held = [self._metrics_among(tracked), None, self.weights, tracked]
            held[1] = self._log_names_of(self.metrics)  # as the model lists them (a subclass may override it)
        try:
            yield
        finally:
            self._held = previous

    def _trainable_now(self) -> list:
        """`trainable_weights`, picked from the weights `_holding_metrics` holds while it holds them."""
        held = self._held
        if held is None or type(self).trainable_weights is not Layer.trainable_weights:
            return self.trainable_weights
        return [v for v in held[2] if v.trainable]

    def _in_keras_order(self, names) -> list[str]:
        """`names` in the order Keras 3 lists results: the loss, the compiled metrics whose
        log name is their own name, each output's loss, the model's own metrics, then the
        rest (per-output metric names) sorted."""
        own = [m.name for m in self.metrics]
        if self._compiled:
            first = ["loss", *(m.name for m in self.compiled_metrics), *self._output_losses.log_names]
            own = first + own
        order = [name for name in dict.fromkeys(own) if name in names]
        return order + sorted(set(names) - set(order))

    def update_metrics(self, y, y_pred, loss, sample_weight=None, output_losses=None, batch_size=None) -> dict:
        """Add one batch to the loss (weighted by the batch size, as Keras does), the
        per-output losses and the metrics; returns the logs so far. The distributed
        strategies call it with the losses and predictions their replicas computed."""
        if batch_size is None and y_pred is not None:
            batch_size = int(tree.flatten(y_pred)[0].shape[0])
        self._loss_tracker.update_state(loss, sample_weight=batch_size)
        if output_losses:
            self._output_losses.update(output_losses, batch_size)
        if y is not None and y_pred is not None and self.compiled_metrics:
            names = self._output_metrics.output_names
            targets = per_output(y, names, "y", "fit")
            weights = None if sample_weight is None else per_output(sample_weight, names, "sample_weight", "fit", True)
            self._output_metrics.update(targets, tree.flatten(y_pred), weights)
        return self.get_metrics_result()

    def compute_metrics(self, x, y, y_pred, sample_weight=None) -> dict:
        """Update the compiled metrics with one batch and return every metric's result, as
        Keras 3's `Model.compute_metrics` (a custom `train_step` may return it)."""
        if y is not None and self.compiled_metrics:
            names = self._output_metrics.output_names
            targets = per_output(y, names, "y", "fit")
            weights = None if sample_weight is None else per_output(sample_weight, names, "sample_weight", "fit", True)
            self._output_metrics.update(targets, tree.flatten(y_pred), weights)
        return self.get_metrics_result()

    def get_metrics_result(self) -> dict:
        """Every metric's value so far, by log name, as Keras 3's method of this name."""
        metrics = self.metrics
        names = self._log_names() if self._held is not None else self._log_names_of(metrics)
        return {name: metric.result() for name, metric in zip(names, metrics, strict=True)}

    def reset_metrics(self) -> None:
        """Start every metric in `metrics` over, as `fit` does at each epoch."""
        for metric in self.metrics:
            metric.reset_state()

    def _metrics_or_logs(self, logs) -> dict:
        """The metrics' results when `logs` (what the last step returned) has their names,
        else the step's own logs (a custom step that logs something else), as floats."""
        results = self.get_metrics_result()
        if isinstance(logs, dict) and set(logs) == set(results):
            logs = results
        return _floats(logs)

    def _keras_result(self, logs: dict, return_dict: bool):
        """Logs as Keras returns them from evaluate and *_on_batch: a dict, or the values in
        `metrics_names` order (the loss alone when it is the only value)."""
        logs = _floats(logs)
        if return_dict:
            return logs
        values = [logs[name] for name in self._in_keras_order(list(logs))]
        return values[0] if len(values) == 1 else values

    # ------------------------------------------------------------------ steps
    def _check_compiled(self, method: str) -> None:
        if not self._compiled:
            raise ValueError(f"{method}: call model.compile(optimizer, loss) first")

    def compute_loss(self, x=None, y=None, y_pred=None, sample_weight=None, training: bool = True) -> Tensor:
        """The total loss of one batch, as Keras 3's `Model.compute_loss`: the compiled
        losses of every output, weighted, plus the layers' own losses (`model.losses`).
        Override it to train on another loss; the built-in steps call it."""
        if self._output_losses is None:
            loss, values = None, []
            for extra in self.losses:
                loss = extra if loss is None else loss + extra
        else:
            loss, values = compiled_loss(self, y, y_pred, sample_weight)
        self._output_loss_values = values
        if loss is None:
            raise ValueError(
                f"{self.name}.compute_loss: the model has no loss: pass loss= to compile, add one with add_loss, "
                "or override compute_loss or train_step"
            )
        return loss

    def _compute_loss(self, x, y, y_pred, sample_weight, training: bool) -> Tensor:
        """`compute_loss`, with `training` where the (overriding) method takes it."""
        if accepts(self.compute_loss, "training"):
            return self.compute_loss(x, y, y_pred, sample_weight, training=training)
        return self.compute_loss(x, y, y_pred, sample_weight)

    def train_step(self, data) -> dict:
        """One update on one batch `data` ((x,), (x, y) or (x, y, sample_weight), as
        `unpack_x_y_sample_weight` takes it); returns the metrics' results so far.
        Override it (Keras 3's override point) to train another way."""
        x, y, sample_weight = unpack_x_y_sample_weight(data)
        y_pred, loss, values = self._step_runner().train(x, y, sample_weight)
        return self.update_metrics(y, y_pred, loss, sample_weight, values)

    def test_step(self, data) -> dict:
        """The loss and metrics of one batch, without an update; returns the metrics' results."""
        x, y, sample_weight = unpack_x_y_sample_weight(data)
        y_pred, loss, values = self._step_runner().test(x, y, sample_weight)
        return self.update_metrics(y, y_pred, loss, sample_weight, values)

    def predict_step(self, data):
        """The model's outputs for one batch (its x)."""
        x, _, _ = unpack_x_y_sample_weight(data)
        return self._step_runner().predict(x)

    def _step_runner(self) -> Steps:
        if self._steps is None:  # an uncompiled model predicts too
            self._steps = Steps(self)
        return self._steps

    def _step_function(self, name: str):
        """`data -> logs` for the step `name`: the built-in one, or the model's own frozen
        (while `jit` is on and it can be) or eager. A built-in train or test step around
        an overridden `compute_loss` runs as the model's own (its metrics may update there)."""
        step = getattr(self, name)
        builtin = getattr(type(self), name) is getattr(Trainer, name)
        plain_loss = type(self).compute_loss is Trainer.compute_loss
        if builtin and (name == "predict_step" or (plain_loss and not self._metrics_beyond_compiled())):
            return step
        if self._custom_steps is None:
            self._custom_steps = {}

        def run(batch):
            if self.jit:
                frozen = self._custom_steps.get(name)
                if frozen is None:
                    frozen = self._custom_steps[name] = FrozenStep(self, step, expected_traces=4)
                try:
                    return frozen(batch)
                except FreezeError as err:
                    self._step_runner()._run_eagerly_after(err)
                    self._custom_steps = {}
            return step(batch)

        return run

    def _metrics_beyond_compiled(self) -> bool:
        """Whether the model or its layers hold metrics of their own (a layer's call may
        update them, which a frozen built-in step defers to the host as a custom step's)."""
        compiled = set()
        if self._compiled:
            own = (self._loss_tracker, *self._output_metrics.metrics, *self._output_losses.trackers)
            compiled = {id(m) for m in own}
        tracked = _tracked_metrics(self) if self._held is None else self._held[3]
        return any(id(m) not in compiled for m in tracked)

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
        validation_freq: int | list = 1,
        seed: int | None = None,
        distribute=None,
    ):
        """Train for `epochs` passes over the data; returns a History. The arguments are
        Keras 3's.

        Args:
            x: an array, a list or dict (by Input name) of arrays (several inputs), a
                `tp.data.Dataset`, a `tp.utils.PyDataset` or a Python generator; the last
                three yield x, (x, y) or (x, y, sample_weight) batches.
            y: the targets (a list or dict of arrays for several outputs); None with a
                Dataset, PyDataset or generator, or for a loss that needs no targets.
            batch_size: samples per step for arrays (default 32).
            epochs: the index of the last epoch (an integer >= 0).
            verbose: "auto", 0 (silent), 1 (a progress bar) or 2 (a line per epoch).
            callbacks: a `tp.callbacks` Callback or a list of them; they also see the validation's test hooks.
            validation_split: the fraction of the array data (cut from the end) to validate on.
            validation_data: (x, y), (x, y, sample_weight), a Dataset, a PyDataset or a
                generator, evaluated after each `validation_freq`-th epoch.
            shuffle: reshuffle the array data (a PyDataset's batch order) each epoch.
            class_weight: {class id: weight}, multiplied into the loss of each sample of that
                class (single output; not with sample_weight).
            sample_weight: one weight per sample (per output: a list or dict of them), as
                the loss's sample_weight: the batch loss is sum(w * loss) / batch size.
            initial_epoch: the epoch to start at (to resume).
            steps_per_epoch: batches per epoch; needed for infinite data. The pass over
                the data then carries on across epochs.
            validation_steps: batches per validation; needed for infinite validation data.
            validation_batch_size: batch size of array validation data (default `batch_size`).
            validation_freq: validate every this many epochs (an int), or after the epochs
                (counted from 1) in a list.
            seed: the shuffle seed (tapeflow; None draws it from tp.random's global stream).
            distribute: a `tp.distributed` strategy (tapeflow), see below.

        Array data is shuffled afresh each epoch, in an order that depends only on (`seed`,
        epoch). A model not yet built is built on the first batch of array data before the
        callbacks start. In `on_train_begin` a callback may set `model._initial_epoch` (the
        epoch to start from) and `model._fit_seed` (the shuffle seed): that is how
        `tp.callbacks.BackupAndRestore` resumes an interrupted run exactly. A generator
        that runs out of data stops the training, with a warning, as in Keras.

        `distribute` (a `tp.distributed` strategy) runs each epoch's steps on a cluster
        over the same batches in the same order: the strategy's `start(model, x, y,
        batch_size)` returns a session whose `run_epoch(batches, callbacks)` trains on
        batches of row numbers (or on the Dataset x) and returns the epoch's logs, and
        whose `close()` ends it; `model._fit_epoch` is the epoch being run. It takes
        neither sample nor class weights, steps, a model with several outputs, nor a
        model with its own train_step.

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
        if not isinstance(shuffle, bool | np.bool_):
            raise ValueError(f"fit: shuffle must be True or False, got {shuffle!r}")
        steps_per_epoch = data.count_argument(steps_per_epoch, "steps_per_epoch", where)
        validation_steps = data.count_argument(validation_steps, "validation_steps", where)
        validation_batch_size = data.count_argument(
            validation_batch_size, "validation_batch_size", where, default=batch_size
        )
        validate_after = _validation_epochs(validation_freq)
        split = data.validation_fraction(validation_split, where)
        if distribute is not None:
            steps = None if isinstance(x, QueueBase) else steps_per_epoch  # a queue's replicas take it
            self._check_distributable("fit", class_weight, sample_weight, steps)
        train = data.DataAdapter(
            x,
            y,
            sample_weight,
            where=where,
            batch_size=batch_size,
            targets=self._targets,
            steps=steps_per_epoch,
            class_weight=class_weight,
            shuffle=bool(shuffle),
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
        step_function = self._step_function("train_step")
        try:
            history = callbacks_module.History()
            progress = callbacks_module.ProgbarLogger(verbose)
            cbs = callbacks_module.CallbackList(
                [[] if callbacks is None else callbacks, history, progress],
                self,
                {"epochs": epochs, "steps": train.steps, "verbose": verbose},
            )
            self.stop_training = False
            self._initial_epoch = None  # a callback restoring a checkpoint sets where to resume
            batch_logs = _reads_batch_logs(cbs.callbacks, "on_train_batch_end")  # else read once an epoch
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
                    logs = None
                    with contextlib.ExitStack() as holding:
                        holding.enter_context(deferring_checks())  # a device's checks: read once, at the epoch's end
                        for step, (xb, yb, swb) in enumerate(profiler.timed_batches(train.epoch(epoch))):
                            with profiler.phase("callbacks"):
                                cbs.on_train_batch_begin(step)
                            with profiler.phase("step"):
                                logs = step_function(pack_x_y_sample_weight(xb, yb, swb))
                            if not step:  # the first step built what it needed: the metrics stay as they are
                                holding.enter_context(self._holding_metrics())
                            with profiler.phase("callbacks"):
                                cbs.on_train_batch_end(step, _floats(logs) if batch_logs else logs)
                            if self.stop_training:  # a callback stops training after this batch, as in Keras
                                break
                    if logs is None:  # a generator that ran out before this epoch
                        self.stop_training = True
                        break
                    logs = self._metrics_or_logs(logs)
                logs = dict(logs)
                if validation is not None and validate_after(epoch):
                    val = self._evaluate_batches(validation.epoch(epoch), cbs)
                    logs.update({f"val_{k}": v for k, v in val.items()})
                cbs.on_epoch_end(epoch, logs)
                if self.stop_training or train.ran_out:
                    break
            if epochs > 0 and session is None:  # an optimizer with use_ema leaves its averages in the weights
                self.optimizer.finalize_variable_values(self.trainable_weights)
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
        own = [name for name in _STEPS if getattr(type(self), name) is not getattr(Trainer, name)]
        if own:
            raise ValueError(f"{where}: distribute= runs the built-in steps; this model overrides {', '.join(own)}")

    def _evaluate_batches(self, batches, cbs=None) -> dict:
        """Run the test step over `batches` (with the callbacks' test hooks); the logs."""
        step_function = self._step_function("test_step")
        self.reset_metrics()
        _hook(cbs, "on_test_begin")
        logs = None
        batch_logs = cbs is not None and _reads_batch_logs(cbs.callbacks, "on_test_batch_end")
        with contextlib.ExitStack() as holding:
            holding.enter_context(deferring_checks())  # a device's checks: read once, at the end
            for step, (xb, yb, swb) in enumerate(batches):
                _hook(cbs, "on_test_batch_begin", step)
                logs = step_function(pack_x_y_sample_weight(xb, yb, swb))
                if not step:
                    holding.enter_context(self._holding_metrics())
                _hook(cbs, "on_test_batch_end", step, _floats(logs) if batch_logs else logs)
        logs = self._metrics_or_logs(logs if logs is not None else {})
        _hook(cbs, "on_test_end", logs)
        return logs

    def evaluate(
        self,
        x=None,
        y=None,
        batch_size: int | None = None,
        verbose="auto",
        sample_weight=None,
        steps: int | None = None,
        callbacks=None,
        return_dict: bool = False,
        class_weight: dict | None = None,
        distribute=None,
    ):
        """The loss and metrics over the data, as Keras 3 returns them: the loss alone (a
        float) when it is the only value, else a list in `model.metrics_names` order;
        `return_dict=True` gives a dict by name.

        `x` and `y` take what `fit` takes. `sample_weight` weighs each sample's loss (and the
        weighted_metrics); `class_weight` (a tapeflow extension: Keras' evaluate has none)
        does so by class. `steps` caps the batches (needed for infinite data); `callbacks`
        see the test hooks. With `distribute`, array inputs are split over the strategy's
        workers at batch boundaries: each runs the forward pass and loss of its batches,
        and the metrics are updated here, so the result equals evaluating in one process
        (a Dataset is evaluated here).

        >>> import numpy as np
        >>> import tapeflow as tp
        >>> model = tp.Sequential([tp.Input((2,)), tp.layers.Dense(1, kernel_initializer="zeros")])
        >>> model.compile("sgd", "mse", metrics=["mae"])
        >>> x, y = np.ones((4, 2)), np.ones(4)
        >>> model.evaluate(x, y, sample_weight=np.array([1.0, 1.0, 0.0, 0.0]), verbose=0)
        [0.5, 1.0]
        >>> model.evaluate(x, y, verbose=0, return_dict=True)
        {'loss': 1.0, 'mae': 1.0}
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
        cbs = callbacks_module.CallbackList(callbacks or [], self, {"steps": batches.steps, "verbose": verbose})
        try:
            logs = self._evaluate_batches(batches.epoch(0), cbs)
        finally:
            batches.close()
        return self._keras_result(logs, return_dict)

    def predict(
        self,
        x,
        batch_size: int | None = None,
        verbose="auto",
        steps: int | None = None,
        callbacks=None,
        distribute=None,
    ):
        """The model's outputs for `x`, batch by batch: one NumPy array, or a list (dict) of
        them for a model with several outputs. `x` takes what `fit` takes; a Dataset,
        PyDataset or generator may yield x alone or (x, y, ...) tuples, as in Keras. `steps`
        caps the batches; `callbacks` see the predict hooks. With `distribute`, array
        inputs are split over the strategy's workers, each running the model's inference
        graph on its part (a Dataset is predicted here)."""
        batch_size = data.count_argument(batch_size, "batch_size", "predict", default=32)
        steps = data.count_argument(steps, "steps", "predict")
        if distribute is not None and not isinstance(x, Dataset):
            return distribute.predict(self, x, batch_size)
        batches = data.DataAdapter(x, where="predict", batch_size=batch_size, steps=steps, steps_argument="steps")
        cbs = callbacks_module.CallbackList(callbacks or [], self, {"steps": batches.steps, "verbose": verbose})
        step_function = self._step_function("predict_step")
        outputs = []
        _hook(cbs, "on_predict_begin")
        try:
            for step, (xb, yb, swb) in enumerate(batches.epoch(0)):
                _hook(cbs, "on_predict_batch_begin", step)
                outputs.append(step_function(pack_x_y_sample_weight(xb, yb, swb)))
                _hook(cbs, "on_predict_batch_end", step, {"outputs": outputs[-1]})
        finally:
            batches.close()
        _hook(cbs, "on_predict_end")
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
        with self._holding_metrics(self.built):
            self.reset_metrics()
            logs = self._step_function("train_step")(pack_x_y_sample_weight(*batch))
            return self._keras_result(logs, return_dict)

    def test_on_batch(self, x, y=None, sample_weight=None, return_dict: bool = False):
        """The loss and metrics of one batch, without an update, in train_on_batch's forms."""
        self._check_compiled("test_on_batch")
        batch = data.one_batch(x, y, sample_weight, "test_on_batch", self._targets)
        with self._holding_metrics(self.built):
            self.reset_metrics()
            logs = self._step_function("test_step")(pack_x_y_sample_weight(*batch))
            return self._keras_result(logs, return_dict)

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
        batch = pack_x_y_sample_weight(data.to_tensors(arrays.x))
        return _concatenate([self._step_function("predict_step")(batch)])


def _jit_setting(jit_compile, jit, run_eagerly) -> bool | str:
    """compile's jit setting from Keras' `jit_compile` and `run_eagerly` and tapeflow's `jit`."""
    if jit is not None:
        if jit_compile != "auto" and jit_compile != jit:
            raise ValueError(f"compile: jit={jit!r} and jit_compile={jit_compile!r} disagree; give one of them")
        jit_compile = jit
    if jit_compile not in (True, False, "auto"):
        raise ValueError(f"compile: jit_compile must be True, False or 'auto', got {jit_compile!r}")
    if not isinstance(run_eagerly, bool | np.bool_):
        raise ValueError(f"compile: run_eagerly must be True or False, got {run_eagerly!r}")
    if run_eagerly:
        if jit_compile is True:
            warnings.warn("compile: run_eagerly=True turns jit_compile=True off (as in Keras)", stacklevel=3)
        return False
    return jit_compile


def _validation_epochs(validation_freq):
    """fit's `validation_freq` as a test of the (0-based) epoch: validate after it or not."""
    if isinstance(validation_freq, int | np.integer) and not isinstance(validation_freq, bool) and validation_freq > 0:
        return lambda epoch: (epoch + 1) % int(validation_freq) == 0
    if isinstance(validation_freq, list | tuple) and all(
        isinstance(e, int | np.integer) and not isinstance(e, bool) for e in validation_freq
    ):
        chosen = {int(e) for e in validation_freq}
        return lambda epoch: epoch + 1 in chosen
    raise ValueError(
        f"fit: validation_freq must be an integer >= 1 or a list of epochs (from 1), got {validation_freq!r}"
    )


def _reads_batch_logs(callbacks, hook: str) -> bool:
    """Whether a callback looks at each batch's logs, which are then made floats (on a device,
    a read per batch): one with its own batch-end `hook`, but for a progress bar that draws
    no bar (verbose 0 or 2)."""
    for cb in callbacks:
        method = getattr(cb, hook, None)
        if method is None or getattr(method, "__func__", None) is getattr(callbacks_module.Callback, hook, None):
            continue
        if isinstance(cb, callbacks_module.ProgbarLogger) and cb.verbose != 1:
            continue
        return True
    return False


def _floats(logs):
    """Logs with each value that is a number or a one-element tensor as a Python float, a
    nested dict flattened into them (as Keras' logs are); other values stay."""
    if not isinstance(logs, dict):
        return logs
    out = {}
    for key, value in logs.items():
        if isinstance(value, dict):
            out.update(_floats(value))
            continue
        try:
            out[key] = float(value)
        except (TypeError, ValueError):
            out[key] = value
    return out


def _tracked_metrics(model):
    """The Metric attributes (and lists of them) of `model` and of the layers it holds,
    depth first; a nested model (a Trainer) keeps its own, as in Keras."""
    found, seen, stack = [], set(), [model]
    while stack:
        layer = stack.pop()
        if id(layer) in seen:
            continue
        seen.add(id(layer))
        values = list(vars(layer).values())
        for value in values:
            for item in value if isinstance(value, list | tuple) else (value,):
                if isinstance(item, Metric):
                    found.append(item)
        held = [sub for sub in layers_in(values) if not isinstance(sub, Trainer)]
        stack.extend(reversed(held))
    return found


def _hook(cbs, name: str, *args) -> None:
    """Call hook `name` on each callback that has it (a Callback may predate the hook)."""
    for callback in [] if cbs is None else cbs.callbacks:
        method = getattr(callback, name, None)
        if method is not None:
            method(*args)


def _concatenate(outputs: list):
    """Per-batch outputs (tensors, or lists or dicts of them) joined along the batch axis."""
    first = outputs[0]
    if isinstance(first, dict):
        return {k: np.concatenate([np.asarray(o[k]) for o in outputs]) for k in first}
    if isinstance(first, list | tuple):
        return [np.concatenate([np.asarray(o[i]) for o in outputs]) for i in range(len(first))]
    return np.concatenate([np.asarray(o) for o in outputs])
