"""The training loop: compile, fit, evaluate, predict, train_on_batch, test_on_batch,
predict_on_batch.

`Trainer` is mixed into `tp.Model`. It knows nothing of backends: a training step is a
GradientTape around the model's forward pass and loss, then the optimizer's update.
By default (`compile(jit="auto")`, as Keras's `run_eagerly=False`) the whole step (forward,
loss, gradients and optimizer update) is frozen into one graph over the model's Variables,
traced once per batch shape, with the learning rate and step number as graph inputs; a
model that cannot be frozen (its Python reads tensor values) trains eagerly on the tape
instead, with a warning. `jit=False` always trains on the tape; `jit=True` never falls back.

Losses and metrics follow Keras 3: a loss with sample weights is sum(w * loss) / batch
size ("sum_over_batch_size"); the logged "loss" is the mean of the batch losses weighted
by batch size; a model with several outputs takes a loss (and loss weight, and metrics)
per output and logs "<output>_loss" and "<output>_<metric>" beside the total "loss".
The per-output bookkeeping is in `tapeflow.output_losses` and `tapeflow.output_metrics`;
the data (argument checks, weights, steps) in `tapeflow.training_data`.

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

import warnings

import numpy as np

from tapeflow import callbacks as callbacks_module
from tapeflow import dtypes, mixed_precision
from tapeflow import metrics as metrics_module
from tapeflow import optimizers as optimizers_module
from tapeflow import training_data as data
from tapeflow.autodiff import GradientTape
from tapeflow.data.dataset import Dataset
from tapeflow.functional import flatten
from tapeflow.graph.structure import flatten_structure, rebuild_structure
from tapeflow.ops.math import add
from tapeflow.ops.random import global_generator
from tapeflow.ops.registry import as_tensor
from tapeflow.output_losses import OutputLosses, per_output
from tapeflow.output_metrics import OutputMetrics
from tapeflow.tensor import FreezeError, Tensor


class Trainer:
    """compile / fit / evaluate / predict for a model whose `__call__(x, training)` runs it."""

    _compiled = False
    jit = "auto"  # an uncompiled model predicts with a frozen graph too
    _frozen_predict = None

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
        self._frozen_steps = self._frozen_predict = None
        self._prediction_specs = None
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

    def _output_loss(self, y, y_pred, sample_weight=None):
        """(the weighted sum of the outputs' losses, each output's unweighted loss)."""
        outputs = self._output_losses
        names = outputs.output_names
        targets = per_output(y, names, "y", "fit")
        weights = None if sample_weight is None else per_output(sample_weight, names, "sample_weight", "fit", True)
        return outputs(targets, flatten(y_pred), weights)

    def _compute_loss(self, y, y_pred, sample_weight=None):
        """(the total loss with the layers' own losses added, each output's unweighted loss)."""
        loss, values = self._output_loss(y, y_pred, sample_weight)
        for extra in self.losses:
            loss = add(loss, extra)
        return loss, values

    def _total_loss(self, y, y_pred, sample_weight=None) -> Tensor:
        return self._compute_loss(y, y_pred, sample_weight)[0]

    def train_step(self, x, y, sample_weight=None) -> dict:
        """One update on one batch; returns the running loss and metric values."""
        if getattr(self, "jit", False):
            try:
                return self._frozen_train_step(x, y, sample_weight)
            except FreezeError as err:
                self._run_eagerly_after(err)
        with GradientTape() as tape:
            y_pred = self(x, training=True)
            loss, values = self._compute_loss(y, y_pred, sample_weight)
            scaled = self.optimizer.scale_loss(loss)
        variables = self.trainable_weights
        grads = tape.gradient(scaled, variables)
        self.optimizer.apply_gradients(zip(grads, variables, strict=True))
        return self._update_metrics(y, y_pred, loss, sample_weight, values)

    def test_step(self, x, y, sample_weight=None) -> dict:
        frozen = None
        if getattr(self, "jit", False):
            self._check_targets(x, y, sample_weight)
            try:
                frozen = self._frozen()[1](x, y, sample_weight)
            except FreezeError as err:
                self._run_eagerly_after(err)
        if frozen is not None:
            y_pred, loss, values = frozen
        else:
            y_pred = self(x, training=False)
            loss, values = self._compute_loss(y, y_pred, sample_weight)
        return self._update_metrics(y, y_pred, loss, sample_weight, values)

    # ------------------------------------------------------------ frozen steps
    def _frozen(self):
        """(train step, test step) as tp.functions, made on first use."""
        if self._frozen_steps is None:
            from tapeflow.graph.function import Function

            logged = bool(self._output_losses.log_names)  # else the one value is the total itself

            def train(x, y, sample_weight, learning_rate, step, trained):
                # `trained` names the trainable variables: a layer made (un)trainable retraces
                with GradientTape() as tape:
                    y_pred = self(x, training=True)
                    loss, values = self._compute_loss(y, y_pred, sample_weight)
                    scaled = self.optimizer.scale_loss(loss)
                variables = self.trainable_weights
                grads = tape.gradient(scaled, variables)
                self.optimizer.apply_gradients_at(zip(grads, variables, strict=True), learning_rate, step)
                return y_pred, loss, values if logged else []

            def test(x, y, sample_weight):
                y_pred = self(x, training=False)
                loss, values = self._compute_loss(y, y_pred, sample_weight)
                return y_pred, loss, values if logged else []

            # expected: full and short last batches, for fit's and for evaluate's batch size
            self._frozen_steps = (Function(train, expected_traces=2), Function(test, expected_traces=4))
        return self._frozen_steps

    def _run_eagerly_after(self, err: FreezeError) -> None:
        """Under jit="auto", go on eagerly after a step failed to freeze; else re-raise."""
        if self.jit != "auto":
            raise err
        warnings.warn(
            f"{type(self).__name__}: the model cannot be frozen into a graph, so it runs eagerly "
            f"(compile(jit=False) says so and silences this): {err}",
            stacklevel=4,
        )
        self.jit, self._frozen_steps, self._frozen_predict = False, None, None

    def _frozen_train_step(self, x, y, sample_weight=None) -> dict:
        self._check_targets(x, y, sample_weight)
        variables = self.trainable_weights
        self.optimizer.build(variables)
        dtype = variables[0].dtype if variables else "float32"
        lr = as_tensor(float(self.optimizer.learning_rate), dtype=dtype)
        step = as_tensor(float(self.optimizer.iterations + 1), dtype=dtype)
        trained = hash(tuple(map(id, variables)))
        y_pred, loss, values = self._frozen()[0](x, y, sample_weight, lr, step, trained)
        self.optimizer.iterations += 1
        return self._update_metrics(y, y_pred, loss, sample_weight, values)

    def _check_targets(self, x, y, sample_weight=None) -> None:
        """The loss's checks of the target values (integer class ids, labels in [0, 1] ...),
        made on the host before a frozen step as eager training makes them: the traced
        step saw only symbolic targets. The loss runs on halves shaped like the predictions
        (a valid probability and logit alike), whose shapes come from one row through the
        model, once."""
        if getattr(self, "_prediction_specs", None) is None:
            first_row = [t[:1] for t in x] if isinstance(x, list | tuple) else x[:1]
            leaves, structure = flatten_structure(self(first_row, training=False))
            self._prediction_specs = (structure, [(leaf.shape[1:], leaf.dtype.np) for leaf in leaves])
        structure, specs = self._prediction_specs
        rows = (x[0] if isinstance(x, list | tuple) else x).shape[0]
        probe = [as_tensor(np.full((rows, *shape), 0.5, dtype)) for shape, dtype in specs]
        with np.errstate(all="ignore"):  # only the checks matter, not the values
            self._output_loss(y, rebuild_structure(structure, probe), sample_weight)

    def _update_metrics(self, y, y_pred, loss, sample_weight=None, output_losses=None, batch_size=None) -> dict:
        """Add one batch to the loss (weighted by the batch size, as Keras does), the
        per-output losses and the metrics; returns the logs so far."""
        if batch_size is None and y_pred is not None:
            batch_size = int(flatten(y_pred)[0].shape[0])
        self._loss_tracker.update_state(float(loss), sample_weight=batch_size)
        if output_losses:
            self._output_losses.update(output_losses, batch_size)
        if y is not None and y_pred is not None and self.compiled_metrics:
            names = self._output_losses.output_names
            weights = None if sample_weight is None else per_output(sample_weight, names, "sample_weight", "fit", True)
            self._output_metrics.update(per_output(y, names, "y", "fit"), flatten(y_pred), weights)
        return self._metric_results()

    def _metric_results(self) -> dict:
        logs = {"loss": self._loss_tracker.result()}
        logs.update(self._output_metrics.results())
        logs.update(self._output_losses.results())
        return logs

    def _reset_metrics(self) -> None:
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

    # ------------------------------------------------------------------- data
    def _array_data(self, x, y, sample_weight, where: str, need_y: bool = True) -> data.ArrayData:
        """Arrays checked as Keras checks them: x required, y required (and numeric) with
        `need_y`, y and sample_weight with one entry per output for several outputs."""
        if x is None:
            raise ValueError(
                f"{where}: x is required: an array, a list of arrays (several inputs) or a tp.data.Dataset"
            )
        as_x = lambda a: data.as_array(a, "x", where, numeric=False)  # noqa: E731
        xs = data.map_structure(as_x, x)
        if not need_y:
            return data.ArrayData(xs, where=where)
        if y is None:
            raise ValueError(
                f"{where}: y is required with array inputs (or pass a tp.data.Dataset that yields (x, y) batches)"
            )
        names = self._output_losses.output_names
        if len(names) == 1:
            ys = data.as_array(y, "y", where)
            sws = None if sample_weight is None else data.as_array(sample_weight, "sample_weight", where)
        else:
            ys = _by_name(per_output(y, names, "y", where), names, "y", where)
            sws = sample_weight
            if isinstance(sample_weight, list | tuple | dict):
                sws = _by_name(per_output(sample_weight, names, "sample_weight", where), names, "sample_weight", where)
            elif sample_weight is not None:
                sws = data.as_array(sample_weight, "sample_weight", where)
        return data.ArrayData(xs, ys, sws, where)

    def _with_class_weight(self, arrays: data.ArrayData, class_weight, where: str) -> data.ArrayData:
        table = data.class_weight_table(class_weight, where)
        if table is None:
            return arrays
        self._check_class_weight(where, arrays.sample_weight)
        arrays.sample_weight = data.class_sample_weights(arrays.y, table)
        return arrays

    def _check_class_weight(self, where: str, sample_weight) -> None:
        if sample_weight is not None:
            raise ValueError(f"{where}: give class_weight or sample_weight, not both (as in Keras)")
        if len(self._output_losses.output_names) > 1:
            raise ValueError(f"{where}: class_weight is only supported for models with a single output")

    def _prepare(self, class_weight, where: str, need_y: bool = True):
        """Dataset element -> (x, y, sample_weight) tensors, class weights applied."""
        table = data.class_weight_table(class_weight, where)

        def prepare(element):
            x, y, sw = element if isinstance(element, _Batch) else data.unpack(element, where, need_y)
            if table is not None and need_y:
                self._check_class_weight(where, sw)
                sw = data.class_sample_weights(y, table)
            return _to_tensors(x), _to_tensors(y), _to_tensors(sw)

        return prepare

    def _batches(
        self,
        source,
        batch_size,
        steps,
        where,
        steps_argument="steps_per_epoch",
        class_weight=None,
        need_y=True,
        passes=None,
    ):
        """EpochBatches over a Dataset (as it is) or arrays: in order, or in the batches
        `passes(epoch)` gives."""
        if isinstance(source, Dataset):
            make_pass, cardinality = (lambda epoch: source), source.cardinality()
        else:
            if passes is None:
                batched = source.dataset().batch(batch_size)
                passes = lambda epoch: batched  # noqa: E731
            split = _Batch.of(source)
            make_pass, cardinality = (lambda epoch: map(split, passes(epoch))), -(-len(source) // batch_size)
        prepare = self._prepare(class_weight, where, need_y)
        return data.EpochBatches(make_pass, cardinality, steps, where, steps_argument, prepare)

    def _source(self, x, y, sample_weight, where: str, need_y: bool = True):
        """A Dataset as it is, or arrays as ArrayData."""
        if isinstance(x, Dataset):
            if y is not None:
                raise ValueError(f"{where}: with a Dataset x, y must be None (the Dataset yields (x, y) batches)")
            if sample_weight is not None:
                raise ValueError(f"{where}: pass sample weights inside the dataset, as (x, y, sample_weight) batches")
            return x
        return self._array_data(x, y, sample_weight, where, need_y)

    def _shuffled_passes(self, arrays: data.ArrayData, batch_size: int, shuffle: bool, seed):
        """fit's passes over arrays: a function from the epoch to a Dataset of batches.

        Arrays are shuffled per epoch with a seed derived from (`self._fit_seed`, epoch)
        alone, so an epoch's order never depends on the epochs run before it in this
        process: a run resumed from a checkpoint (which stores the base seed) reshuffles
        exactly as the uninterrupted run did.
        """
        self._fit_seed = None
        elements = arrays.dataset()
        if not shuffle:
            batched = elements.batch(batch_size)
            return lambda epoch: batched
        if seed is None:
            seed = int(global_generator().numpy.integers(2**63))
        if isinstance(seed, bool) or not isinstance(seed, int | np.integer) or seed < 0:
            raise ValueError(f"fit: seed must be None or an integer >= 0, got {seed!r}")
        self._fit_seed = int(seed)

        def batches(epoch):
            seed = _epoch_seed(self._fit_seed, epoch)
            return elements.shuffle(len(arrays), seed=seed, reshuffle_each_iteration=False).batch(batch_size)

        return batches

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
        source = self._source(x, y, sample_weight, where)
        if split and validation_data is None:
            if isinstance(source, Dataset):
                raise ValueError("fit: validation_split needs arrays, not a Dataset")
            source, validation_data = source.split(split)
        if not isinstance(source, Dataset):
            source = self._with_class_weight(source, class_weight, where)
            if not len(source):
                raise ValueError(f"{where}: the data is empty: x has no samples")
        validation = None
        if validation_data is not None:
            val_source = _validation_source(self, validation_data)
            validation = self._batches(
                val_source, validation_batch_size, validation_steps, "fit: validation_data", "validation_steps"
            )
        batches = train = None
        if distribute is not None:
            self._check_distributable("fit", class_weight, sample_weight, steps_per_epoch)
            arrays, train, steps = self._distributed_passes(source, batch_size, shuffle, seed, initial_epoch)
        else:
            if isinstance(source, Dataset):  # class weights are applied batch by batch
                batches = self._batches(source, batch_size, steps_per_epoch, where, class_weight=class_weight)
            else:  # class weights are already sample weights
                passes = self._shuffled_passes(source, batch_size, shuffle, seed)
                batches = self._batches(source, batch_size, steps_per_epoch, where, passes=passes)
            steps = batches.steps
        if not self.built and not isinstance(source, Dataset):  # so callbacks (BackupAndRestore) see the weights
            first = source.rows_of(slice(None, batch_size))
            self(_to_tensors(first.x), training=False)
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
                    logs = session.run_epoch(source if train is None else train(epoch), cbs)
                else:
                    logs = {}
                    for step, (xb, yb, swb) in enumerate(batches.epoch(epoch)):
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
            for opened in (batches, validation):
                if opened is not None:
                    opened.close()
        return history

    def _distributed_passes(self, source, batch_size: int, shuffle: bool, seed, initial_epoch: int):
        """(the arrays a strategy's session starts on, epoch -> batches of row numbers (None
        for a Dataset, which the session runs itself), steps per epoch or None)."""
        if isinstance(source, Dataset):
            steps = source.cardinality()
            return (source, None), None, steps if steps >= 0 else None
        rows = data.ArrayData(np.arange(len(source)))
        train = self._shuffled_passes(rows, batch_size, shuffle, seed)
        return (source.x, source.y), train, len(train(initial_epoch))

    def _check_distributable(self, where: str, class_weight, sample_weight, steps) -> None:
        steps_name = "steps_per_epoch" if where == "fit" else "steps"
        given = {"class_weight": class_weight, "sample_weight": sample_weight, steps_name: steps}
        given = [name for name, value in given.items() if value is not None]
        if given:
            raise ValueError(f"{where}: {', '.join(given)} cannot be combined with distribute= yet; run without it")
        if len(self._output_losses.output_names) > 1:
            raise ValueError(f"{where}: distribute= runs models with one output only")

    def _evaluate_batches(self, batches) -> dict:
        self._reset_metrics()
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
        source = self._source(x, y, sample_weight, "evaluate")
        if isinstance(source, Dataset):
            batches = self._batches(source, batch_size, steps, "evaluate", "steps", class_weight=class_weight)
        else:
            source = self._with_class_weight(source, class_weight, "evaluate")
            batches = self._batches(source, batch_size, steps, "evaluate", "steps")
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
        if isinstance(x, Dataset):
            source = x
        else:
            source = self._array_data(x, None, None, "predict", need_y=False)
        batches = self._batches(source, batch_size, steps, "predict", "steps", need_y=False)
        try:
            outputs = [self._predict_step(xb) for xb, _, _ in batches.epoch(0)]
        finally:
            batches.close()
        return _concatenate(outputs)

    def _predict_step(self, x):
        """The model's outputs for one batch: a frozen graph (traced per batch shape) unless
        jit is off, or the model cannot be frozen (under "auto": then eagerly, with a warning)."""
        if self.jit:
            if self._frozen_predict is None:
                from tapeflow.graph.function import Function

                def predict(x):
                    return self(x, training=False)

                self._frozen_predict = Function(predict, expected_traces=2)
            try:
                return self._frozen_predict(x)
            except FreezeError as err:
                self._run_eagerly_after(err)
        return self(x, training=False)

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
        return self._on_batch("train_on_batch", x, y, sample_weight, class_weight, return_dict, self.train_step)

    def test_on_batch(self, x, y=None, sample_weight=None, return_dict: bool = False):
        """The loss and metrics of one batch, without an update, in train_on_batch's forms."""
        return self._on_batch("test_on_batch", x, y, sample_weight, None, return_dict, self.test_step)

    def predict_on_batch(self, x):
        """The model's outputs for one batch, as NumPy (a list or dict for several outputs).

        >>> import numpy as np
        >>> import tapeflow as tp
        >>> tp.Sequential([tp.Input((2,)), tp.layers.Dense(3)]).predict_on_batch(np.ones((4, 2))).shape
        (4, 3)
        """
        if isinstance(x, Dataset):
            raise TypeError("predict_on_batch: takes one batch of arrays, not a Dataset; use predict")
        arrays = self._array_data(x, None, None, "predict_on_batch", need_y=False)
        return _concatenate([self._predict_step(_to_tensors(arrays.x))])

    def _on_batch(self, where, x, y, sample_weight, class_weight, return_dict, step):
        self._check_compiled(where)
        if isinstance(x, Dataset):
            raise TypeError(f"{where}: takes one batch of arrays, not a Dataset; use fit or evaluate")
        arrays = self._with_class_weight(self._array_data(x, y, sample_weight, where), class_weight, where)
        self._reset_metrics()
        logs = step(_to_tensors(arrays.x), _to_tensors(arrays.y), _to_tensors(arrays.sample_weight))
        return self._keras_result(logs, return_dict)


class _Batch(tuple):
    """(x, y, sample_weight) of one batch cut from ArrayData (the parts it lacks are None)."""

    @staticmethod
    def of(arrays: data.ArrayData):
        has = [part is not None for part in (arrays.x, arrays.y, arrays.sample_weight)]

        def split(element):
            parts = iter(element if sum(has) > 1 else (element,))
            return _Batch(next(parts) if present else None for present in has)

        return split


def _validation_source(model, validation_data):
    where = "fit: validation_data"
    if isinstance(validation_data, data.ArrayData | Dataset):  # ArrayData: the rows validation_split held out
        return validation_data
    if isinstance(validation_data, tuple | list) and len(validation_data) in (2, 3):
        return model._source(*validation_data, *(None,) * (3 - len(validation_data)), where)
    kind = type(validation_data).__name__
    raise ValueError(f"{where} must be (x, y), (x, y, sample_weight) or a Dataset, got {kind}")


def _by_name(entries: list, names: list[str], argument: str, where: str) -> dict:
    """Per-output arrays keyed by output name (outputs without one left out)."""
    return {
        name: data.as_array(entry, f"{argument}['{name}']", where)
        for name, entry in zip(names, entries, strict=True)
        if entry is not None
    }


def _to_tensors(structure):
    """A batch as tensors: arrays become tensors, tuples lists, dicts keep their keys."""
    if structure is None:
        return None
    if isinstance(structure, dict):
        return {k: as_tensor(v) for k, v in structure.items()}
    if isinstance(structure, list | tuple):
        return [as_tensor(v) for v in structure]
    return as_tensor(structure)


def _concatenate(outputs: list):
    """Per-batch outputs (tensors, or lists or dicts of them) joined along the batch axis."""
    first = outputs[0]
    if isinstance(first, dict):
        return {k: np.concatenate([np.asarray(o[k]) for o in outputs]) for k in first}
    if isinstance(first, list | tuple):
        return [np.concatenate([np.asarray(o[i]) for o in outputs]) for i in range(len(first))]
    return np.concatenate([np.asarray(o) for o in outputs])


def _epoch_seed(base: int, epoch: int) -> int:
    """The shuffle seed of one epoch: a function of (base seed, epoch) only."""
    return int(np.random.SeedSequence([base, epoch]).generate_state(1, np.uint64)[0]) >> 1
