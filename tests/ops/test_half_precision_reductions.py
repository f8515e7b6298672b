"""Reductions of float16 and bfloat16 tensors accumulate in float32 (as NumPy's float16
mean and torch do), eagerly and frozen, and come back in the input's dtype."""

import numpy as np
import pytest

import tapeflow as tp

ml_dtypes = pytest.importorskip("ml_dtypes")

CASES = [
    ("mean_float16_large", lambda x: tp.mean(x), np.full(100, 1000.0), "float16", 1000.0),
    ("sum_bfloat16_ones", lambda x: tp.sum(x), np.ones(1000), "bfloat16", 1000.0),
    ("var_float16_offset", lambda x: tp.var(x), np.array([1000.0, 1002.0] * 50), "float16", 1.0),
    ("std_bfloat16", lambda x: tp.std(x), np.array([10.0, 14.0] * 500), "bfloat16", 2.0),
    ("mean_axis_float16", lambda x: tp.mean(x, axis=1)[0], np.full((2, 5000), 30.0), "float16", 30.0),
]


@pytest.mark.parametrize("frozen", [False, True])
@pytest.mark.parametrize("fn, values, dtype, expected", [c[1:] for c in CASES], ids=[c[0] for c in CASES])
def test_half_precision_reductions_accumulate_in_float32(fn, values, dtype, expected, frozen):
    x = tp.cast(tp.tensor(values.astype("float32")), dtype)
    out = tp.function(fn)(x) if frozen else fn(x)
    assert out.dtype.name == dtype
    np.testing.assert_allclose(float(tp.cast(out, "float32")), expected, rtol=1e-2)


def test_mixed_bfloat16_pooling_and_layer_normalization_keep_their_statistics():
    tp.mixed_precision.set_global_policy("mixed_bfloat16")
    try:
        pooled = tp.layers.GlobalAveragePooling2D()(tp.ones((1, 64, 64, 3)))
        normed = tp.layers.LayerNormalization()(tp.tensor(np.linspace(0.0, 10.0, 2000)[None].astype("float32")))
    finally:
        tp.mixed_precision.set_global_policy(None)
    np.testing.assert_allclose(tp.cast(pooled, "float32").numpy(), 1.0)
    values = tp.cast(normed, "float32").numpy()
    assert abs(values.mean()) < 2e-2 and abs(values.std() - 1.0) < 2e-2
