"""Hyperparameters that would turn every weight into NaN are refused: NaN or infinite
schedule settings, normalization epsilons and momenta, clip bounds, and a learning rate a
schedule computes as NaN (refused before the update, eager and jit alike)."""

from __future__ import annotations

import numpy as np
import pytest

import tapeflow as tp


@pytest.mark.parametrize(
    "make",
    [
        lambda: tp.optimizers.schedules.ExponentialDecay(0.1, 10, float("nan")),
        lambda: tp.optimizers.schedules.ExponentialDecay(float("inf"), 10, 0.9),
        lambda: tp.optimizers.schedules.CosineDecay(0.1, float("nan")),
        lambda: tp.optimizers.schedules.CosineDecay(0.1, 10, alpha=float("nan")),
        lambda: tp.optimizers.schedules.PiecewiseConstantDecay([float("nan")], [0.1, 0.01]),
        lambda: tp.layers.BatchNormalization(momentum=float("nan")),
        lambda: tp.layers.BatchNormalization(epsilon=float("inf")),
        lambda: tp.layers.LayerNormalization(epsilon=float("nan")),
        lambda: tp.clip(tp.ones((2,)), float("nan"), 1.0),
    ],
)
def test_hyperparameters_refuse_nan_and_infinity(make):
    """A NaN decay rate or momentum trained silently to NaN weights."""
    with pytest.raises(ValueError, match="must be a finite number|must not be NaN"):
        make()


@pytest.mark.parametrize("jit", [False, True])
def test_a_schedule_giving_nan_stops_training_before_the_update(jit):
    class Broken(tp.optimizers.schedules.LearningRateSchedule):
        def __call__(self, step):
            return 0.1 if step < 1 else float("nan")

        def get_config(self):
            return {}

    model = tp.Sequential([tp.Input((3,)), tp.layers.Dense(2)])
    model.compile(tp.optimizers.SGD(Broken()), "mse", jit=jit)
    x, y = np.ones((4, 3), np.float32), np.zeros((4, 2), np.float32)
    model.train_on_batch(x, y)
    weights = model.get_weights()
    with pytest.raises(
        ValueError, match=r"SGD: learning_rate from its schedule at step 1 must be a number >= 0, got nan"
    ):
        model.train_on_batch(x, y)
    for a, b in zip(weights, model.get_weights(), strict=True):
        np.testing.assert_array_equal(a, b)
