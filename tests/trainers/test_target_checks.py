"""The targets are checked batch by batch before the step, in NumPy, with the loss's own
words: a frozen step (which sees only symbolic targets) refuses what the loss refuses
eagerly, before any update."""

from __future__ import annotations

import numpy as np
import pytest

import tapeflow as tp

RNG = np.random.default_rng(5)
X = RNG.standard_normal((6, 4)).astype(np.float32)
SPARSE = np.array([0, 1, 2, 1, 0, 2])
ONE_HOT = np.eye(3, dtype=np.float32)[SPARSE]

CASES = {
    "class id too large": ("sparse_categorical_crossentropy", np.where(SPARSE == 1, 3, SPARSE)),
    "negative class id": (tp.losses.SparseCategoricalCrossentropy(from_logits=True), SPARSE - 1),
    "fractional class id": ("sparse_categorical_crossentropy", SPARSE + 0.25),
    "boolean class ids": ("sparse_categorical_crossentropy", SPARSE > 0),
    "class ids with a trailing axis": ("sparse_categorical_crossentropy", np.where(SPARSE == 2, 5, SPARSE)[:, None]),
    "one-hot label above 1": ("categorical_crossentropy", ONE_HOT * 3.0),
    "binary label below 0": (tp.losses.BinaryCrossentropy(from_logits=True), -ONE_HOT),
    "binary label NaN": ("binary_crossentropy", np.where(ONE_HOT == 1, np.nan, 0.0)),
    "one-hot labels of the wrong shape": ("categorical_crossentropy", ONE_HOT[:, :2] * 3.0),
}


def _model(loss, jit):
    tp.random.seed(2)
    model = tp.Sequential([tp.Input((4,)), tp.layers.Dense(3, activation="softmax")])
    model.compile("sgd", loss, jit=jit)
    return model


@pytest.mark.parametrize("case", sorted(CASES))
def test_a_frozen_step_refuses_what_the_loss_refuses_in_its_words(case):
    loss, y = CASES[case]
    reference = _model(loss, False)
    with pytest.raises(ValueError) as eager:
        reference.loss(tp.tensor(y), reference(X, training=True))
    for jit in (True, False):
        model = _model(loss, jit)
        before = model.get_weights()
        for call in (model.train_on_batch, model.test_on_batch):
            with pytest.raises(ValueError) as refused:
                call(X, y)
            assert str(refused.value) == str(eager.value)
        with pytest.raises(ValueError) as refused:
            model.fit(tp.data.Dataset.from_tensor_slices((X, y)).batch(6), verbose=0)
        assert str(refused.value) == str(eager.value)
        assert model.optimizer.iterations == 0
        for a, b in zip(before, model.get_weights(), strict=True):
            np.testing.assert_array_equal(a, b)


def test_the_class_count_comes_from_the_class_axis():
    model = tp.Sequential([tp.Input((5, 4)), tp.layers.Dense(3)])
    model.compile("sgd", tp.losses.SparseCategoricalCrossentropy(from_logits=True, axis=1))
    x = RNG.standard_normal((2, 5, 4)).astype(np.float32)
    model.train_on_batch(x, np.full((2, 3), 4))  # axis 1 has 5 classes
    with pytest.raises(ValueError, match=r"label 5 is out of range \[0, 5\)"):
        model.train_on_batch(x, np.full((2, 3), 5))


def test_losses_without_checks_never_run_the_model_for_them():
    model = _model("mse", True)
    model.fit(X, ONE_HOT, batch_size=3, verbose=0)
    assert model._output_spec_cache is None
    model.compile("sgd", "sparse_categorical_crossentropy")
    model.fit(X, SPARSE, batch_size=3, verbose=0)
    assert model._output_spec_cache == [((3,), np.dtype("float32"))]
