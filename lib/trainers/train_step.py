"""The one train step, written once: forward pass, compiled loss, loss scaling and
gradients (`batch_gradients`), then the optimizer's update (`train_step`).

Eager `fit` runs `train_step` on the tape; the frozen step (`Steps`, `compile(jit=...)`'s
default) traces the same function into one graph per batch shape, with the learning rate
and step number as graph inputs; the distributed replicas trace `batch_gradients` alone
and hand the `unscaled` gradients to whoever applies them.

>>> import numpy as np
>>> import tapeflow as tp
>>> model = tp.Sequential([tp.Input((3,)), tp.layers.Dense(1, kernel_initializer="ones")])
>>> model.compile(tp.optimizers.SGD(0.1), "mse")
>>> x, y = tp.ones((4, 3)), tp.zeros((4, 1))
>>> step = batch_gradients(model, x, y, None, model.trainable_weights)
>>> float(step.loss), [g.numpy().ravel().tolist() for g in step.gradients]
(9.0, [[6.0, 6.0, 6.0], [6.0]])
>>> _ = train_step(model, x, y)
>>> [round(float(w), 4) for w in model.layers[0].kernel.numpy().ravel()]
[0.4, 0.4, 0.4]
"""

from __future__ import annotations

import warnings
from typing import NamedTuple

from tapeflow import tree
from tapeflow.autodiff import GradientTape
from tapeflow.backends.common import check_pending
from tapeflow.graph.function import Function, functions_run_eagerly
from tapeflow.ops.math import add, cast, divide, multiply
from tapeflow.ops.registry import as_tensor
from tapeflow.optimizers import LossScaleOptimizer
from tapeflow.tensor import TRACING, FreezeError, IndexedSlices, Tensor
from tapeflow.trainers.compile_losses import per_output


def compiled_loss(model, y, y_pred, sample_weight=None) -> tuple[Tensor | None, list]:
    """(the total loss: every output's compiled loss, weighted, plus the layers' own
    losses (regularization, `add_loss`), None when there is neither; each output's
    unweighted loss)."""
    outputs = model._output_losses
    names = outputs.output_names
    loss, values = None, []
    if outputs.active:
        targets = per_output(y, names, "y", "fit")
        weights = None if sample_weight is None else per_output(sample_weight, names, "sample_weight", "fit", True)
        loss, values = outputs(targets, tree.flatten(y_pred), weights)
    for extra in model.losses:
        loss = extra if loss is None else add(loss, extra)
    return loss, values


def model_loss(model, x, y, y_pred, sample_weight, training: bool) -> tuple[Tensor, list]:
    """(the total loss from `model.compute_loss` (a user's override included), and the
    per-output losses the built-in `compute_loss` worked out on the way, for the logs)."""
    model._output_loss_values = []
    loss = model._compute_loss(x, y, y_pred, sample_weight, training)
    values, model._output_loss_values = model._output_loss_values, []
    return loss, values


class BatchGradients(NamedTuple):
    """What one batch gives: the predictions, the total loss, each output's loss, and
    the gradients of the scaled loss (`optimizer.scale_loss`), one per variable."""

    y_pred: object
    loss: Tensor
    output_losses: list
    gradients: list


def batch_gradients(model, x, y, sample_weight, variables, forward=None) -> BatchGradients:
    """Forward pass, loss, scaled loss and its gradients with respect to `variables`.

    The gradients are those `model.optimizer.apply_gradients` takes (a LossScaleOptimizer
    divides the scale out again); `unscaled` gives the true ones. `forward(x, training)`
    replaces the model's call (to place its layers on devices, say).
    """
    with GradientTape() as tape:
        y_pred = (forward or model)(x, training=True)
        loss, values = model_loss(model, x, y, y_pred, sample_weight, training=True)
        scaled = model.optimizer.scale_loss(loss)
    return BatchGradients(y_pred, loss, values, tape.gradient(scaled, variables))


def unscaled(optimizer, gradients: list) -> list:
    """The true gradients, from gradients of `optimizer.scale_loss(loss)`: for a consumer
    that applies them without the loss-scale optimizer (a parameter server)."""
    if not isinstance(optimizer, LossScaleOptimizer):
        return gradients
    inverse = divide(1.0, optimizer.scale)
    return [_times(g, inverse) for g in gradients]


def _times(gradient, factor):
    if gradient is None:
        return None
    if isinstance(gradient, IndexedSlices):
        values = multiply(gradient.values, cast(factor, gradient.values.dtype))
        return IndexedSlices(values, gradient.indices, gradient.dense_shape)
    return multiply(gradient, cast(factor, gradient.dtype))


def train_step(model, x, y, sample_weight=None, learning_rate=None, step=None) -> tuple:
    """One update on one batch: `batch_gradients` of the trainable weights, then the
    optimizer applies them. Eagerly (no `learning_rate`) the optimizer counts the
    iteration; inside a frozen step the rate and the step number are graph inputs and
    the caller counts. Returns (predictions, loss, each output's loss)."""
    variables = model.trainable_weights
    result = batch_gradients(model, x, y, sample_weight, variables)
    pairs = zip(result.gradients, variables, strict=True)
    if learning_rate is None:
        check_pending(deferrable=True)  # ids and labels checked on a device: before any weight changes
        model.optimizer.apply_gradients(pairs)
    else:
        model.optimizer.apply_gradients_at(pairs, learning_rate, step)
    return result.y_pred, result.loss, result.output_losses


def test_step(model, x, y, sample_weight=None) -> tuple:
    """The forward pass in inference mode and the loss: (predictions, loss, each output's loss)."""
    y_pred = model(x, training=False)
    return (y_pred, *model_loss(model, x, y, y_pred, sample_weight, training=False))


class Steps:
    """A model's train, test and predict steps, run frozen into graphs (traced once per
    batch shape) while `model.jit` is on, else eagerly on the tape.

    Under `jit="auto"` a model that cannot be frozen (its Python reads a tensor value)
    goes on eagerly for good, with a warning; `jit=True` re-raises the FreezeError.
    """

    def __init__(self, model):
        self.model = model
        self.frozen_train = self.frozen_test = self.frozen_predict = None  # tp.functions, made on first use
        self._graphs: dict = {}  # the graphs the step functions traced, by the shapes of their tensors

    def train(self, x, y, sample_weight=None) -> tuple:
        if self.model.jit and TRACING.tracer is None:
            try:
                return self._train_frozen(x, y, sample_weight)
            except FreezeError as err:
                self._run_eagerly_after(err)
        return train_step(self.model, x, y, sample_weight)

    def test(self, x, y, sample_weight=None) -> tuple:
        if self.model.jit and TRACING.tracer is None:
            try:
                return self._run(self.frozen()[1], x, y, sample_weight)
            except FreezeError as err:
                self._run_eagerly_after(err)
        return test_step(self.model, x, y, sample_weight)

    def predict(self, x):
        if self.model.jit and TRACING.tracer is None:
            if self.frozen_predict is None:
                model = self.model

                def predict(x):
                    return model(x, training=False)

                self.frozen_predict = Function(predict, expected_traces=2)
            try:
                return self._run(self.frozen_predict, x)
            except FreezeError as err:
                self._run_eagerly_after(err)
        return self.model(x, training=False)

    def frozen(self) -> tuple[Function, Function]:
        """(train step, test step) as tp.functions, made on first use."""
        if self.frozen_train is None:
            model = self.model
            logged = bool(model._output_losses.log_names)  # else the one value is the total itself

            def train(x, y, sample_weight, learning_rate, step, trained):
                # `trained` names the trainable variables: a layer made (un)trainable retraces
                y_pred, loss, values = train_step(model, x, y, sample_weight, learning_rate, step)
                return y_pred, loss, values if logged else []

            def test(x, y, sample_weight):
                y_pred, loss, values = test_step(model, x, y, sample_weight)
                return y_pred, loss, values if logged else []

            # expected: full and short last batches, for fit's and for evaluate's batch size
            self.frozen_train, self.frozen_test = Function(train, expected_traces=2), Function(test, expected_traces=4)
        return self.frozen_train, self.frozen_test

    def _train_frozen(self, x, y, sample_weight) -> tuple:
        optimizer, variables = self.model.optimizer, self.model._trainable_now()
        optimizer.build(variables)
        dtype = variables[0].dtype if variables else "float32"
        learning_rate = as_tensor(float(optimizer.learning_rate), dtype=dtype)
        step = as_tensor(float(optimizer.iterations + 1), dtype=dtype)
        trained = hash(tuple(map(id, variables)))
        result = self._run(self.frozen()[0], x, y, sample_weight, learning_rate, step, trained)
        optimizer.iterations += 1
        return result

    def _run_eagerly_after(self, err: FreezeError) -> None:
        """Under jit="auto", go on eagerly after a step failed to freeze; else re-raise."""
        model = self.model
        if model.jit != "auto":
            raise err
        warnings.warn(
            f"{type(model).__name__}: the model cannot be frozen into a graph, so it runs eagerly "
            f"(compile(jit=False) says so and silences this): {err}",
            stacklevel=5,
        )
        model.jit = False
        self.frozen_train = self.frozen_test = self.frozen_predict = None
        self._graphs = {}

    def _run(self, function: Function, *args):
        """`function(*args)`. Where each argument is one tensor, None or an int, the graph
        that `function` traced for their shapes and dtypes runs straight away, without
        the function binding and describing its arguments again at every step."""
        key = [id(function)]
        feeds = []
        for arg in args:
            if type(arg) is Tensor:
                key.append((arg.shape, arg.dtype))
                feeds.append(arg)
            elif arg is None or type(arg) is int:
                key.append(arg)
            else:
                return function(*args)
        if functions_run_eagerly():
            return function(*args)
        key = tuple(key)
        hit = self._graphs.get(key)
        if hit is not None and function.graphs.get(hit[0]) is hit[1]:
            return hit[1](*feeds)
        result = function(*args)
        signature = function._key(args, {})[0]
        if signature in function.graphs:
            self._graphs[key] = (signature, function.graphs[signature])
        return result
