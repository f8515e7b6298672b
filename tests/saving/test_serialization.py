"""get_config / from_config round-trips every public class of the serializable families
(layers, models, optimizers, losses, metrics, initializers, regularizers, schedules),
discovered by introspection so that a new class cannot skip the test; and the registry of
user classes resolves configs by name only (Keras 3's `register_keras_serializable`)."""

from __future__ import annotations

import inspect
import json
import sys
from functools import partial
from pathlib import Path

import numpy as np
import pytest

import tapeflow as tp
from tapeflow import initializers, losses, metrics, models, optimizers, regularizers
from tapeflow.optimizers import schedules

sys.path.insert(0, str(Path(__file__).parents[1] / "layers"))
from cases_conv import CASES as CONV_CASES  # noqa: E402
from cases_keras_layers import CASES as KERAS_LAYER_CASES  # noqa: E402

L = tp.layers


def _functional():
    a, b = tp.Input((3,), name="a"), tp.Input((2,), name="b")
    shared = L.Dense(4, activation="tanh")
    h = L.Concatenate()([shared(a), L.Dense(4)(b)])
    out = shared(L.Dense(3)(L.Dense(4)(h)))  # the shared layer is called twice
    return tp.Model([a, b], {"out": L.Dense(1)(out), "h": h})


# class name -> (factory, example input shape(s) or None for objects that take no input)
LAYERS = {
    "Dense": (lambda: L.Dense(3, activation="relu", kernel_initializer=initializers.HeNormal(seed=1)), (2, 4)),
    "Conv2D": (lambda: L.Conv2D(2, 3, padding="same", kernel_regularizer=regularizers.L2(0.1)), (1, 5, 5, 2)),
    "Conv2DTranspose": (lambda: L.Conv2DTranspose(2, 3, strides=2, output_padding=1), (1, 3, 3, 2)),
    "MaxPooling2D": (lambda: L.MaxPooling2D(2, padding="same"), (1, 5, 5, 2)),
    "AveragePooling2D": (lambda: L.AveragePooling2D((2, 3)), (1, 5, 5, 2)),
    "GlobalAveragePooling2D": (lambda: L.GlobalAveragePooling2D(keepdims=True), (1, 3, 3, 2)),
    "GlobalMaxPooling2D": (L.GlobalMaxPooling2D, (1, 3, 3, 2)),
    "Conv1D": (lambda: L.Conv1D(2, 3, padding="causal", dilation_rate=2, groups=2), (1, 7, 4)),
    "Conv1DTranspose": (lambda: L.Conv1DTranspose(2, 3, strides=2, output_padding=1), (1, 3, 2)),
    "MaxPooling1D": (lambda: L.MaxPooling1D(2, padding="same"), (1, 5, 2)),
    "AveragePooling1D": (lambda: L.AveragePooling1D(3, strides=1), (1, 5, 2)),
    "GlobalAveragePooling1D": (lambda: L.GlobalAveragePooling1D(keepdims=True), (1, 3, 2)),
    "GlobalMaxPooling1D": (lambda: L.GlobalMaxPooling1D(data_format="channels_first"), (1, 3, 2)),
    "ReLU": (lambda: L.ReLU(max_value=6.0, negative_slope=0.1), (2, 3)),
    "LeakyReLU": (lambda: L.LeakyReLU(0.2), (2, 3)),
    "ELU": (lambda: L.ELU(alpha=0.5), (2, 3)),
    "PReLU": (lambda: L.PReLU(alpha_initializer="ones", alpha_regularizer="l2", shared_axes=[1]), (2, 3, 4)),
    "Softmax": (lambda: L.Softmax(axis=[1, 2]), (2, 3, 4)),
    "Flatten": (L.Flatten, (2, 3, 2)),
    "Reshape": (lambda: L.Reshape((3, -1)), (2, 6)),
    "Activation": (lambda: L.Activation("gelu"), (2, 3)),
    "Dropout": (lambda: L.Dropout(0.25, seed=3), (2, 3)),
    "Masking": (lambda: L.Masking(mask_value=0.5), (2, 3)),
    "BatchNormalization": (lambda: L.BatchNormalization(momentum=0.9), (4, 3)),
    "LayerNormalization": (lambda: L.LayerNormalization(epsilon=1e-4), (4, 3)),
    "Embedding": (lambda: L.Embedding(7, 3), "ids"),
    "SimpleRNN": (lambda: L.SimpleRNN(3, return_sequences=True), (2, 4, 3)),
    "LSTM": (lambda: L.LSTM(3, go_backwards=True), (2, 4, 3)),
    "GRU": (lambda: L.GRU(3, reset_after=False), (2, 4, 3)),
    "RNN": (lambda: L.RNN(L.GRUCell(2)), (2, 4, 3)),
    "StackedRNNCells": (
        lambda: L.StackedRNNCells([L.LSTMCell(2), L.GRUCell(3)]),
        {"states": [(2, 2), (2, 2), (2, 3)]},
    ),
    "Bidirectional": (lambda: L.Bidirectional(L.LSTM(3, return_sequences=True), merge_mode="ave"), (2, 4, 3)),
    "SimpleRNNCell": (lambda: L.SimpleRNNCell(3), {"states": [(2, 3)]}),
    "LSTMCell": (lambda: L.LSTMCell(3), {"states": [(2, 3), (2, 3)]}),
    "GRUCell": (lambda: L.GRUCell(3), {"states": [(2, 3)]}),
    "Add": (L.Add, [(2, 3), (2, 3)]),
    "Subtract": (L.Subtract, [(2, 3), (2, 3)]),
    "Multiply": (L.Multiply, [(2, 3), (2, 3)]),
    "Average": (L.Average, [(2, 3), (2, 3)]),
    "Maximum": (L.Maximum, [(2, 3), (2, 3)]),
    "Minimum": (L.Minimum, [(2, 3), (2, 3)]),
    "Concatenate": (lambda: L.Concatenate(axis=1), [(2, 3), (2, 2)]),
    "InputLayer": (lambda: L.InputLayer(shape=(3,)), (2, 3)),
    "Attention": (lambda: L.Attention(use_scale=True, score_mode="concat"), [(2, 3, 4), (2, 5, 4)]),
    "AdditiveAttention": (lambda: L.AdditiveAttention(dropout=0.1, seed=2), [(2, 3, 4), (2, 5, 4)]),
    "MultiHeadAttention": (
        lambda: L.MultiHeadAttention(2, 3, value_dim=2, output_shape=4, kernel_regularizer="l2"),
        {"args": [(2, 3, 5), (2, 4, 6)]},
    ),
    "GroupedQueryAttention": (
        lambda: L.GroupQueryAttention(head_dim=2, num_query_heads=2, num_key_value_heads=1),
        {"args": [(2, 3, 4), (2, 5, 4)]},
    ),
    "ContrastLimitedAdaptiveHistogramEqualization": (
        lambda: L.ContrastLimitedAdaptiveHistogramEqualization(
            value_range=(-2, 2), clip_limit=2.0, tile_grid_size=(2, 2)
        ),
        (2, 4, 5, 3),
    ),
    # models
    "Sequential": (lambda: tp.Sequential([tp.Input((4,)), L.Dense(3, activation="relu"), L.Dense(2)]), (2, 4)),
    "Functional": (_functional, [(2, 3), (2, 2)]),
}


def _check_cases_as_examples(cases) -> dict:
    """{class name: (factory, input spec)} from `check_layer` cases, the first case of each
    class, for the layers the table above does not list."""
    found = {}
    for _, factory, shape, kwargs in cases:
        if kwargs.get("call_kwargs"):
            continue
        made = partial(factory, dtype="float32")  # the cases' factories take the dtype check_layer gives
        name = type(made()).__name__
        spec = ("ids", shape, kwargs["int_range"]) if "int_range" in kwargs else shape
        found.setdefault(name, (made, spec))
    return found


for _name, _example in _check_cases_as_examples(CONV_CASES + KERAS_LAYER_CASES).items():
    LAYERS.setdefault(_name, _example)

OBJECTS = {
    "optimizers": {
        "SGD": lambda: optimizers.SGD(0.1, momentum=0.9, nesterov=True),
        "Adam": lambda: optimizers.Adam(schedules.ExponentialDecay(0.1, 10, 0.5), amsgrad=True),
        "AdamW": lambda: optimizers.AdamW(0.01, weight_decay=0.1),
        "RMSprop": lambda: optimizers.RMSprop(0.01, momentum=0.5, clipnorm=1.0),
        "Adagrad": lambda: optimizers.Adagrad(0.1, initial_accumulator_value=0.2),
        "Adadelta": lambda: optimizers.Adadelta(0.5, rho=0.9),
        "Adafactor": lambda: optimizers.Adafactor(0.01, clip_threshold=0.5),
        "Adamax": lambda: optimizers.Adamax(0.01, beta_1=0.8),
        "Ftrl": lambda: optimizers.Ftrl(0.1, l1_regularization_strength=0.01),
        "Lamb": lambda: optimizers.Lamb(0.01, epsilon=1e-6),
        "Lion": lambda: optimizers.Lion(0.001, beta_2=0.95),
        "Nadam": lambda: optimizers.Nadam(schedules.InverseTimeDecay(0.1, 5, 0.5)),
        "Muon": lambda: optimizers.Muon(0.01, exclude_layers=["head"], ns_steps=3),
        "ScheduleFreeAdamW": lambda: optimizers.ScheduleFreeAdamW(0.01, warmup_steps=10),
        "MultiOptimizer": lambda: optimizers.MultiOptimizer(
            optimizers.OptimizerMap(optimizers.SGD(0.1), {"dense/.*": optimizers.Adam(0.01)})
        ),
    },
    "losses": {
        "MeanSquaredError": losses.MeanSquaredError,
        "MeanAbsoluteError": lambda: losses.MeanAbsoluteError(reduction="sum"),
        "Huber": lambda: losses.Huber(delta=0.5),
        "BinaryCrossentropy": lambda: losses.BinaryCrossentropy(from_logits=True, label_smoothing=0.1),
        "CategoricalCrossentropy": lambda: losses.CategoricalCrossentropy(axis=1),
        "SparseCategoricalCrossentropy": lambda: losses.SparseCategoricalCrossentropy(from_logits=True),
        "LossFunctionWrapper": lambda: losses.LossFunctionWrapper(losses.huber, name="h", delta=2.0),
        "MeanAbsolutePercentageError": losses.MeanAbsolutePercentageError,
        "MeanSquaredLogarithmicError": losses.MeanSquaredLogarithmicError,
        "LogCosh": losses.LogCosh,
        "CosineSimilarity": lambda: losses.CosineSimilarity(axis=0),
        "Hinge": losses.Hinge,
        "SquaredHinge": losses.SquaredHinge,
        "CategoricalHinge": losses.CategoricalHinge,
        "KLDivergence": losses.KLDivergence,
        "Poisson": losses.Poisson,
        "BinaryFocalCrossentropy": lambda: losses.BinaryFocalCrossentropy(apply_class_balancing=True, gamma=1.5),
        "CategoricalFocalCrossentropy": lambda: losses.CategoricalFocalCrossentropy(alpha=0.5),
        "CategoricalGeneralizedCrossEntropy": lambda: losses.CategoricalGeneralizedCrossEntropy(q=0.7),
        "Dice": lambda: losses.Dice(axis=[1]),
        "Tversky": lambda: losses.Tversky(alpha=0.3, beta=0.7),
        "Circle": lambda: losses.Circle(gamma=10.0),
        "CTC": losses.CTC,
    },
    "metrics": {
        "Mean": lambda: metrics.Mean(name="m"),
        "Accuracy": metrics.Accuracy,
        "AutoAccuracy": lambda: metrics.AutoAccuracy(loss=losses.BinaryCrossentropy(from_logits=True)),
        "BinaryAccuracy": lambda: metrics.BinaryAccuracy(threshold=0.3),
        "CategoricalAccuracy": metrics.CategoricalAccuracy,
        "SparseCategoricalAccuracy": metrics.SparseCategoricalAccuracy,
        "TopKCategoricalAccuracy": lambda: metrics.TopKCategoricalAccuracy(k=2),
        "SparseTopKCategoricalAccuracy": lambda: metrics.SparseTopKCategoricalAccuracy(k=3),
        "MeanSquaredError": metrics.MeanSquaredError,
        "MeanAbsoluteError": metrics.MeanAbsoluteError,
        "MeanAbsolutePercentageError": metrics.MeanAbsolutePercentageError,
        "MeanMetricWrapper": lambda: metrics.MeanMetricWrapper(metrics.binary_accuracy, threshold=0.2),
        "Precision": lambda: metrics.Precision(thresholds=0.4),
        "Recall": lambda: metrics.Recall(top_k=2, class_id=1),
        "TruePositives": metrics.TruePositives,
        "TrueNegatives": lambda: metrics.TrueNegatives(thresholds=[0.2, 0.6]),
        "FalsePositives": lambda: metrics.FalsePositives(thresholds=0.3),
        "FalseNegatives": metrics.FalseNegatives,
        "AUC": lambda: metrics.AUC(curve="PR", multi_label=True, label_weights=[0.5, 1.0]),
        "BinaryCrossentropy": lambda: metrics.BinaryCrossentropy(from_logits=True),
        "CategoricalCrossentropy": lambda: metrics.CategoricalCrossentropy(label_smoothing=0.1),
        "SparseCategoricalCrossentropy": lambda: metrics.SparseCategoricalCrossentropy(ignore_class=0),
        "KLDivergence": metrics.KLDivergence,
        "Poisson": metrics.Poisson,
        "Hinge": metrics.Hinge,
        "SquaredHinge": metrics.SquaredHinge,
        "CategoricalHinge": metrics.CategoricalHinge,
        "CosineSimilarity": lambda: metrics.CosineSimilarity(axis=0),
        "LogCoshError": metrics.LogCoshError,
        "MeanSquaredLogarithmicError": metrics.MeanSquaredLogarithmicError,
        "RootMeanSquaredError": metrics.RootMeanSquaredError,
        "R2Score": lambda: metrics.R2Score(class_aggregation=None, num_regressors=1),
        "Sum": metrics.Sum,
        "PearsonCorrelation": metrics.PearsonCorrelation,
        "ConcordanceCorrelation": metrics.ConcordanceCorrelation,
        "F1Score": lambda: metrics.F1Score(average="macro"),
        "FBetaScore": lambda: metrics.FBetaScore(beta=2.0, threshold=0.4),
        "IoU": lambda: metrics.IoU(3, [0, 2], ignore_class=1),
        "BinaryIoU": lambda: metrics.BinaryIoU([1], threshold=0.3),
        "MeanIoU": lambda: metrics.MeanIoU(3),
        "OneHotIoU": lambda: metrics.OneHotIoU(3, [1]),
        "OneHotMeanIoU": lambda: metrics.OneHotMeanIoU(4),
        "SensitivityAtSpecificity": lambda: metrics.SensitivityAtSpecificity(0.5),
        "SpecificityAtSensitivity": lambda: metrics.SpecificityAtSensitivity(0.5, num_thresholds=20),
        "PrecisionAtRecall": lambda: metrics.PrecisionAtRecall(0.8, class_id=1),
        "RecallAtPrecision": lambda: metrics.RecallAtPrecision(0.9),
    },
    "initializers": {
        "Zeros": initializers.Zeros,
        "Ones": initializers.Ones,
        "Constant": lambda: initializers.Constant(0.5),
        "Identity": lambda: initializers.Identity(gain=2.0),
        "RandomNormal": lambda: initializers.RandomNormal(1.0, 0.5, seed=2),
        "RandomUniform": lambda: initializers.RandomUniform(-1.0, 1.0, seed=2),
        "TruncatedNormal": lambda: initializers.TruncatedNormal(stddev=0.2, seed=2),
        "VarianceScaling": lambda: initializers.VarianceScaling(2.0, "fan_out", "uniform", seed=2),
        "GlorotUniform": lambda: initializers.GlorotUniform(seed=2),
        "GlorotNormal": lambda: initializers.GlorotNormal(seed=2),
        "HeNormal": lambda: initializers.HeNormal(seed=2),
        "HeUniform": lambda: initializers.HeUniform(seed=2),
        "LecunNormal": lambda: initializers.LecunNormal(seed=2),
        "LecunUniform": lambda: initializers.LecunUniform(seed=2),
        "Orthogonal": lambda: initializers.Orthogonal(gain=0.5, seed=2),
        "STFT": lambda: initializers.STFT(side="imag", window="hamming"),
    },
    "regularizers": {
        "L1": lambda: regularizers.L1(0.1),
        "L2": lambda: regularizers.L2(0.2),
        "L1L2": lambda: regularizers.L1L2(0.1, 0.2),
        "OrthogonalRegularizer": lambda: regularizers.OrthogonalRegularizer(0.1, mode="columns"),
    },
    "schedules": {
        "ExponentialDecay": lambda: schedules.ExponentialDecay(0.1, 5, 0.5, staircase=True),
        "CosineDecay": lambda: schedules.CosineDecay(0.1, 100, alpha=0.1),
        "PiecewiseConstantDecay": lambda: schedules.PiecewiseConstantDecay([5, 10], [1.0, 0.5, 0.1]),
        "PolynomialDecay": lambda: schedules.PolynomialDecay(0.1, 10, power=2.0, cycle=True),
        "InverseTimeDecay": lambda: schedules.InverseTimeDecay(0.1, 5, 0.5, staircase=True),
        "CosineDecayRestarts": lambda: schedules.CosineDecayRestarts(0.1, 4, t_mul=1.5, m_mul=0.8),
    },
}
# The base classes: only their subclasses make objects worth saving.
ABSTRACT = {
    "schedules": {"LearningRateSchedule"},
    "metrics": {"Metric"},
    "optimizers": {"Optimizer"},
    "losses": {"Loss"},
    "initializers": {"Initializer"},
    "regularizers": {"Regularizer"},
}
# Public classes of a family that its `get` does not rebuild from a config.
NOT_BY_GET = {"optimizers": {"LossScaleOptimizer"}}  # a wrapper around another optimizer

FAMILIES = {
    "optimizers": (optimizers, optimizers.Optimizer, optimizers.get),
    "losses": (losses, losses.Loss, losses.get),
    "metrics": (metrics, metrics.Metric, metrics.get),
    "initializers": (initializers, initializers.Initializer, initializers.get),
    "regularizers": (regularizers, regularizers.Regularizer, regularizers.get),
    "schedules": (schedules, schedules.LearningRateSchedule, schedules.deserialize),
}


def _public_classes(module, base) -> set[str]:
    return {
        name
        for name, obj in vars(module).items()
        if not name.startswith("_")
        and inspect.isclass(obj)
        and issubclass(obj, base)
        and obj.__name__ == name  # not an alias such as regularizers.l2 (Keras's spelling of L2)
        and (obj.__module__ == module.__name__ or obj.__module__.startswith(module.__name__ + "."))
    }


def _json(config):
    return json.loads(json.dumps(config))


def test_every_public_class_has_an_example():
    layer_classes = _public_classes(L, L.Layer) | {
        name
        for name in vars(L)
        if inspect.isclass(getattr(L, name))
        and issubclass(getattr(L, name), L.Layer)
        and getattr(L, name).__name__ == name  # not an alias such as MaxPool2D (MaxPooling2D)
    }
    layer_classes -= {"Layer"}  # the base class
    layer_classes -= {n for n in layer_classes if getattr(L, n).__module__ == "tapeflow.layers.left_out"}
    model_classes = _public_classes(models, L.Layer) - {"Model"}  # Model(...) is Functional or a subclass
    assert layer_classes | model_classes <= set(LAYERS), sorted((layer_classes | model_classes) - set(LAYERS))
    for family, (module, base, _) in FAMILIES.items():
        found = _public_classes(module, base) - ABSTRACT.get(family, set()) - NOT_BY_GET.get(family, set())
        assert found == set(OBJECTS[family]), (family, found ^ set(OBJECTS[family]))


def _inputs(spec, rng):
    if isinstance(spec, dict) and "args" in spec:  # several positional arguments
        return [_inputs(s, rng) for s in spec["args"]]
    if isinstance(spec, dict):  # a cell: inputs, then its states
        return [_inputs((2, 4), rng), [_inputs(s, rng) for s in spec["states"]]]
    if spec == "ids":
        return tp.tensor(rng.integers(0, 7, size=(2, 5)))
    if isinstance(spec, tuple) and spec and spec[0] == "ids":  # ("ids", shape, (low, high))
        _, shape, (low, high) = spec
        return tp.tensor(rng.integers(low, high, size=shape))
    if isinstance(spec, list):
        return [tp.tensor(rng.normal(size=s).astype("float32")) for s in spec]
    return tp.tensor(rng.normal(size=spec).astype("float32"))


@pytest.mark.parametrize("name", sorted(LAYERS))
def test_layer_and_model_config_round_trip(name, rng):
    factory, spec = LAYERS[name]
    layer = factory()
    assert type(layer).__name__ == name
    config = _json(tp.layers.serialize(layer))
    clone = tp.layers.deserialize(config)
    assert type(clone) is type(layer)
    assert _json(clone.get_config()) == config["config"]
    assert _json(type(layer).from_config(config["config"]).get_config()) == config["config"]
    args = _inputs(spec, rng) if isinstance(spec, dict) else [_inputs(spec, rng)]
    reference = layer(*args)
    clone(*args)  # build (a no-op for models built at construction)
    clone.set_weights(layer.get_weights())
    got = clone(*args)
    for a, b in zip(_flat(reference), _flat(got), strict=True):
        np.testing.assert_array_equal(a.numpy(), b.numpy())


def _flat(value) -> list:
    if isinstance(value, dict):
        return [t for k in sorted(value) for t in _flat(value[k])]
    if isinstance(value, list | tuple):
        return [t for v in value for t in _flat(v)]
    return [value]


@pytest.mark.parametrize("family, name", [(f, n) for f in sorted(OBJECTS) for n in sorted(OBJECTS[f])])
def test_object_config_round_trip(family, name):
    module, base, get = FAMILIES[family]
    obj = OBJECTS[family][name]()
    assert type(obj).__name__ == name
    config = _json(tp.serialization.serialize(obj))
    clone = get(config)
    assert type(clone) is type(obj)
    assert _json(clone.get_config()) == config["config"]


def test_round_tripped_objects_compute_the_same():
    w = np.random.default_rng(0).normal(size=(3, 4))
    for factory in OBJECTS["initializers"].values():
        init = factory()
        clone = initializers.get(_json(tp.serialization.serialize(init)))
        shape = (4, 1, 3) if isinstance(init, initializers.STFT) else (3, 3)  # STFT makes Conv1D kernels
        np.testing.assert_array_equal(init(shape, "float64").numpy(), clone(shape, "float64").numpy())
    for factory in OBJECTS["regularizers"].values():
        reg = factory()
        clone = regularizers.get(_json(tp.serialization.serialize(reg)))
        assert float(reg(tp.tensor(w))) == float(clone(tp.tensor(w)))
    for factory in OBJECTS["schedules"].values():
        sched = factory()
        clone = schedules.deserialize(_json(schedules.serialize(sched)))
        assert [sched(s) for s in range(0, 30, 3)] == [clone(s) for s in range(0, 30, 3)]
    y, p = tp.tensor([[0.0, 1.0], [1.0, 0.0]]), tp.tensor([[0.3, 0.7], [0.6, 0.4]])
    for name, factory in OBJECTS["losses"].items():
        loss = factory()
        sparse = ("SparseCategoricalCrossentropy", "CategoricalGeneralizedCrossEntropy", "Circle")
        labels, preds = (tp.tensor([1, 0]) if name in sparse else y), p
        if name == "CTC":  # label sequences against per-step logits
            labels, preds = tp.tensor([[1, 0], [1, 1]]), tp.zeros((2, 3, 2))
        assert float(loss(labels, preds)) == float(losses.get(_json(tp.serialization.serialize(loss)))(labels, preds))


def test_nested_objects_are_class_name_config_dicts():
    dense = L.Dense(2, kernel_initializer=initializers.RandomNormal(stddev=0.1), kernel_regularizer="l2")
    config = dense.get_config()
    assert config["kernel_initializer"] == {
        "class_name": "RandomNormal",
        "config": {"mean": 0.0, "stddev": 0.1, "seed": None},
    }
    assert config["kernel_regularizer"] == "l2"
    adam = optimizers.Adam(schedules.PiecewiseConstantDecay([2], [0.1, 0.01])).get_config()
    assert adam["learning_rate"]["class_name"] == "PiecewiseConstantDecay"


# ------------------------------------------------------------------ registry
@tp.saving.register_serializable(package="test_serialization")
class Scaled(L.Layer):
    def __init__(self, factor=2.0, **kwargs):
        super().__init__(**kwargs)
        self.factor = factor

    def call(self, inputs):
        return inputs * self.factor

    def get_config(self):
        return {**super().get_config(), "factor": self.factor}


class Unregistered(L.Layer):
    def call(self, inputs):
        return inputs


@tp.saving.register_serializable(package="test_serialization")
class Shifted(initializers.Initializer):
    def __init__(self, shift=1.0):
        self.shift = shift

    def __call__(self, shape, dtype=None):
        return tp.full(shape, self.shift, dtype=dtype or "float32")

    def get_config(self):
        return {"shift": self.shift}


def test_registered_classes_round_trip_with_their_registered_name():
    config = tp.layers.serialize(Scaled(3.0, name="s"))
    assert config["registered_name"] == "test_serialization>Scaled"
    assert tp.saving.registered_name(Scaled) == "test_serialization>Scaled"
    clone = tp.layers.deserialize(_json(config))
    assert type(clone) is Scaled and clone.factor == 3.0
    dense = L.Dense(2, kernel_initializer=Shifted(0.5))
    rebuilt = L.Dense.from_config(_json(dense.get_config()))
    rebuilt(tp.ones((1, 3)))
    np.testing.assert_array_equal(rebuilt.kernel.numpy(), np.full((3, 2), 0.5, "float32"))


def test_an_unregistered_class_is_an_error_naming_it_unless_passed_as_a_custom_object():
    config = _json(tp.layers.serialize(Unregistered(name="u")))
    with pytest.raises(ValueError, match=r"'Unregistered'.*register_serializable"):
        tp.layers.deserialize(config)
    assert type(tp.layers.deserialize(config, custom_objects={"Unregistered": Unregistered})) is Unregistered


def test_resolution_never_imports_a_module_named_by_the_config(monkeypatch):
    import builtins

    imported = []
    real_import = builtins.__import__
    monkeypatch.setattr(
        builtins, "__import__", lambda name, *a, **k: imported.append(name) or real_import(name, *a, **k)
    )
    config = {"class_name": "Popen", "module": "subprocess", "registered_name": "subprocess>Popen", "config": {}}
    with pytest.raises(ValueError, match="Popen"):
        tp.layers.deserialize(config)
    assert "subprocess" not in imported


def test_a_registered_class_of_the_wrong_kind_is_refused():
    with pytest.raises(TypeError, match="not a Layer"):
        tp.layers.deserialize({"class_name": "Shifted", "config": {"shift": 1.0}})


def test_registering_a_name_twice_is_refused():
    with pytest.raises(ValueError, match="already registered"):
        tp.saving.register_serializable(package="test_serialization")(type("Scaled", (L.Layer,), {}))


def test_a_registered_class_never_shadows_a_tapeflow_class_of_the_same_name():
    @tp.saving.register_serializable(package="test_shadow")
    class Dense(L.Layer):
        pass

    config = tp.layers.serialize(L.Dense(2))
    assert type(tp.layers.deserialize(config)) is L.Dense
    assert type(tp.layers.deserialize(tp.layers.serialize(Dense()))) is Dense


@tp.saving.register_serializable(package="test_serialization")
class Gated(L.Layer):
    """No get_config of its own: its plain constructor arguments are its config (Keras 3)."""

    def __init__(self, units, gates=(1, 2), **kwargs):
        super().__init__(**kwargs)
        self.units, self.gates = units, tuple(gates)

    def call(self, inputs):
        return inputs * float(sum(self.gates))


def test_a_layer_without_get_config_is_configured_by_its_constructor_arguments():
    layer = Gated(3, gates=[2, 5], name="g")
    assert layer.get_config() == {"name": "g", "trainable": True, "dtype": "float32", "units": 3, "gates": [2, 5]}
    clone = tp.layers.deserialize(_json(tp.layers.serialize(layer)))
    assert (clone.units, clone.gates, clone.name) == (3, (2, 5), "g")
    with pytest.raises(NotImplementedError, match=r"units=<.*Dense.*override get_config"):
        Gated(L.Dense(2)).get_config()
