"""`tp.random.dropout` against `keras.random.dropout`: the same kept values, scaling and
noise-shape sharing (the random streams differ, so the masks are compared by their rules)."""

import keras
import numpy as np
import pytest

import tapeflow as tp


@pytest.mark.parametrize("library", ["tapeflow", "keras"])
def test_kept_values_are_scaled_and_the_rate_holds(library):
    x = np.arange(1.0, 20001.0, dtype=np.float32)
    mod = tp if library == "tapeflow" else keras
    y = np.asarray(mod.random.dropout(mod.ops.convert_to_tensor(x), 0.25, seed=3))
    kept = y != 0
    np.testing.assert_allclose(y[kept], x[kept] / 0.75, rtol=1e-6)
    assert abs(kept.mean() - 0.75) < 0.02


@pytest.mark.parametrize("library", ["tapeflow", "keras"])
def test_noise_shape_shares_one_draw_along_its_unit_axes(library):
    mod = tp if library == "tapeflow" else keras
    ones = mod.ops.convert_to_tensor(np.ones((64, 5), np.float32))
    y = np.asarray(mod.random.dropout(ones, 0.5, noise_shape=(None, 1), seed=1))
    rows_zero, rows_kept = (y == 0).all(axis=1), (y == 2).all(axis=1)
    assert (rows_zero | rows_kept).all() and rows_zero.any() and rows_kept.any()


def test_gradient_is_the_mask_over_the_keep_probability():
    x = tp.tensor(np.linspace(1, 2, 50, dtype=np.float32))
    with tp.GradientTape() as tape:
        tape.watch(x)
        y = tp.random.dropout(x, 0.4, seed=7)
        total = tp.sum(y)
    g = tape.gradient(total, x).numpy()
    np.testing.assert_allclose(g, (y.numpy() != 0) / 0.6, rtol=1e-6)


def test_a_seed_repeats_the_draw_and_bad_rates_are_refused():
    x = tp.ones((100,))
    assert (tp.random.dropout(x, 0.5, seed=11).numpy() == tp.random.dropout(x, 0.5, seed=11).numpy()).all()
    with pytest.raises(ValueError, match=r"dropout: rate must be in \[0, 1\), got 1.0"):
        tp.random.dropout(x, 1.0)
    with pytest.raises(ValueError, match="noise_shape"):
        tp.random.dropout(x, 0.5, noise_shape=(1, 1))
