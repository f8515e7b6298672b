"""tp.constraints against keras.constraints: values, configs, lookup and serialization."""

import os

os.environ.setdefault("KERAS_BACKEND", "torch")

import keras  # noqa: E402
import numpy as np  # noqa: E402
import pytest  # noqa: E402

import tapeflow as tp  # noqa: E402

W = np.random.default_rng(2).normal(scale=2.0, size=(4, 3, 5)).astype("float32")

CASES = [
    ("Constraint", {}),
    ("MaxNorm", {}),
    ("MaxNorm", {"max_value": 1.5, "axis": 1}),
    ("MaxNorm", {"max_value": 3.0, "axis": [0, 1]}),
    ("NonNeg", {}),
    ("UnitNorm", {}),
    ("UnitNorm", {"axis": -1}),
    ("MinMaxNorm", {}),
    ("MinMaxNorm", {"min_value": 1.0, "max_value": 2.5, "rate": 0.7, "axis": 2}),
]
IDS = [f"{n}-{i}" for i, (n, _) in enumerate(CASES)]


@pytest.mark.parametrize(("name", "kwargs"), CASES, ids=IDS)
def test_matches_keras(name, kwargs):
    ours = getattr(tp.constraints, name)(**kwargs)
    theirs = getattr(keras.constraints, name)(**kwargs)
    want = keras.ops.convert_to_numpy(theirs(keras.ops.convert_to_tensor(W)))
    np.testing.assert_allclose(ours(W).numpy(), want, rtol=1e-5, atol=1e-6)
    assert ours.get_config() == theirs.get_config()
    again = tp.constraints.deserialize(tp.constraints.serialize(ours))
    assert type(again) is type(ours) and again.get_config() == ours.get_config()


@pytest.mark.parametrize(
    ("name", "cls"),
    [
        ("max_norm", "MaxNorm"),
        ("min_max_norm", "MinMaxNorm"),
        ("non_neg", "NonNeg"),
        ("unit_norm", "UnitNorm"),
        ("MaxNorm", "MaxNorm"),
        ("NonNeg", "NonNeg"),
    ],
)
def test_get_by_name(name, cls):
    assert type(tp.constraints.get(name)) is getattr(tp.constraints, cls)


def test_aliases_are_the_classes():
    assert tp.constraints.max_norm is tp.constraints.MaxNorm
    assert tp.constraints.min_max_norm is tp.constraints.MinMaxNorm
    assert tp.constraints.non_neg is tp.constraints.NonNeg
    assert tp.constraints.unit_norm is tp.constraints.UnitNorm


def test_get_passes_through_and_rejects():
    c = tp.constraints.NonNeg()
    assert tp.constraints.get(c) is c and tp.constraints.get(None) is None

    def fn(w):
        return w

    assert tp.constraints.get(fn) is fn
    with pytest.raises(ValueError, match="unknown constraint"):
        tp.constraints.get("no_such_constraint")
    with pytest.raises(TypeError, match="constraints.get"):
        tp.constraints.get(3)
    with pytest.raises(ValueError, match="max_value"):
        tp.constraints.MaxNorm(float("nan"))
    with pytest.raises(ValueError, match="exceeds"):
        tp.constraints.MinMaxNorm(2.0, 1.0)


def test_custom_constraint_registers():
    @tp.saving.register_serializable(package="tests")
    class Clip(tp.constraints.Constraint):
        def __init__(self, limit=1.0):
            self.limit = limit

        def __call__(self, w):
            return tp.clip(w, -self.limit, self.limit)

        def get_config(self):
            return {"limit": self.limit}

    config = tp.constraints.serialize(Clip(0.5))
    again = tp.constraints.deserialize(config)
    assert isinstance(again, Clip) and again.limit == 0.5
    assert float(tp.max(again(W))) == 0.5
