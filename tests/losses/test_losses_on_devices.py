"""Every loss on every accelerator, with sample weights: the value and its gradient with
respect to the predictions equal the CPU's ("gpu:0" is the GPU backend with NumPy standing
in for CuPy where there is no GPU; the XLA suite adds xla:0 and xla:1)."""

import numpy as np
import pytest

import tapeflow as tp

RNG = np.random.default_rng(2)
LABELS = RNG.integers(0, 4, 6)
ONE_HOT = np.eye(4, dtype=np.float32)[LABELS]
LOGITS = RNG.standard_normal((6, 4)).astype(np.float32)
PROBABILITIES = np.exp(LOGITS) / np.exp(LOGITS).sum(axis=1, keepdims=True)
BITS = RNG.integers(0, 2, (6, 4)).astype(np.float32)
TARGETS = RNG.standard_normal((6, 4)).astype(np.float32)
CASES = {
    "mse": (tp.losses.MeanSquaredError(), TARGETS, LOGITS),
    "mae": (tp.losses.MeanAbsoluteError(), TARGETS, LOGITS),
    "huber": (tp.losses.Huber(delta=0.5), TARGETS, LOGITS),
    "binary": (tp.losses.BinaryCrossentropy(), BITS, 1.0 / (1.0 + np.exp(-LOGITS))),
    "binary_logits_smoothed": (tp.losses.BinaryCrossentropy(from_logits=True, label_smoothing=0.1), BITS, LOGITS),
    "categorical": (tp.losses.CategoricalCrossentropy(), ONE_HOT, PROBABILITIES),
    "categorical_logits": (tp.losses.CategoricalCrossentropy(from_logits=True, label_smoothing=0.2), ONE_HOT, LOGITS),
    "sparse": (tp.losses.SparseCategoricalCrossentropy(), LABELS, PROBABILITIES),
    "sparse_logits": (tp.losses.SparseCategoricalCrossentropy(from_logits=True), LABELS, LOGITS),
}
WEIGHTS = RNG.uniform(0.1, 2.0, 6).astype(np.float32)


@pytest.fixture
def device(accelerator):
    return accelerator


def _loss_and_gradient(loss, y_true, y_pred, where):
    with tp.device(where):
        predictions = tp.tensor(y_pred)
        with tp.GradientTape() as tape:
            tape.watch(predictions)
            value = loss(tp.tensor(y_true), predictions, sample_weight=tp.tensor(WEIGHTS))
        grad = tape.gradient(value, predictions)
    assert value.device == grad.device == tp.devices.parse_device(where)
    return value.numpy(), grad.numpy()


@pytest.mark.parametrize("case", sorted(CASES))
def test_a_loss_on_a_device_equals_the_cpu(device, case):
    loss, y_true, y_pred = CASES[case]
    got, want = _loss_and_gradient(loss, y_true, y_pred, device), _loss_and_gradient(loss, y_true, y_pred, "cpu")
    for g, w in zip(got, want, strict=True):
        np.testing.assert_allclose(g, w, rtol=1e-5, atol=1e-6)
