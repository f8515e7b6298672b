"""MeanAbsolutePercentageError against Keras's metric and function on the same batches."""

import keras
import numpy as np

import tapeflow as tp


def test_mape_metric_and_function_equal_keras():
    rng = np.random.default_rng(5)
    batches = [(rng.normal(size=(8, 3)), rng.normal(size=(8, 3)), rng.uniform(size=8)) for _ in range(3)]
    batches.append((np.zeros((4, 3)), rng.normal(size=(4, 3)), np.ones(4)))  # zero targets: the epsilon floor
    ours, theirs = tp.metrics.MeanAbsolutePercentageError(), keras.metrics.MeanAbsolutePercentageError()
    for y_true, y_pred, weights in batches:
        ours.update_state(y_true, y_pred, sample_weight=weights)
        theirs.update_state(y_true, y_pred, sample_weight=weights)
        np.testing.assert_allclose(
            tp.metrics.mean_absolute_percentage_error(y_true, y_pred),
            keras.ops.convert_to_numpy(keras.metrics.mean_absolute_percentage_error(y_true, y_pred)),
            rtol=1e-5,
        )
    np.testing.assert_allclose(ours.result(), float(theirs.result()), rtol=1e-5)
    assert ours.name == theirs.name == "mean_absolute_percentage_error"
    assert type(tp.metrics.get("mape")) is tp.metrics.MeanAbsolutePercentageError
