"""16-bit transfer compression against float64 references and torch's bfloat16."""

import numpy as np
import pytest
import torch

from tapeflow.distributed.pipeline.compression import RELATIVE_ERROR, check_compression, decode, encode


@pytest.mark.parametrize("compression", ["float16", "bfloat16"])
def test_round_trip_is_within_the_stated_relative_error_and_half_the_bytes(compression, rng):
    magnitudes = np.exp(rng.uniform(-9, 11, 10_000))  # 1.2e-4 to 6e4: float16's normal range
    x = (rng.choice([-1, 1], 10_000) * magnitudes).astype(np.float32)
    sent = encode(x, compression)
    back = decode(sent, compression)
    assert back.dtype == np.float32 and back.shape == x.shape
    assert 2 * sent.nbytes == x.nbytes
    error = np.abs(back.astype(np.float64) - x.astype(np.float64)) / np.abs(x.astype(np.float64))
    assert error.max() <= RELATIVE_ERROR[compression]


def test_float16_keeps_tiny_values_to_an_absolute_error(rng):
    x = rng.uniform(-6e-5, 6e-5, 1000).astype(np.float32)  # below float16's normal range
    error = np.abs(decode(encode(x, "float16"), "float16").astype(np.float64) - x)
    assert error.max() <= 2.0**-25  # half float16's smallest subnormal


def test_bfloat16_rounds_as_torch_does(rng):
    x = rng.standard_normal(5_000).astype(np.float32) * 100
    ours = decode(encode(x, "bfloat16"), "bfloat16")
    theirs = torch.from_numpy(x).to(torch.bfloat16).to(torch.float32).numpy()
    np.testing.assert_array_equal(ours, theirs)


@pytest.mark.parametrize("compression", ["float16", "bfloat16"])
def test_special_values_survive(compression):
    x = np.array([np.inf, -np.inf, np.nan, 0.0, -0.0], np.float32)
    back = decode(encode(x, compression), compression)
    np.testing.assert_array_equal(back[:2], x[:2])
    assert np.isnan(back[2]) and back[3] == 0 and np.signbit(back[4])


def test_other_dtypes_and_no_compression_pass_unchanged():
    ids = np.arange(6, dtype=np.int64)
    assert encode(ids, "float16") is ids and decode(ids, "float16", "int64") is ids
    x = np.ones(3, np.float32)
    assert encode(x, None) is x and decode(x, None) is x
    with pytest.raises(ValueError, match="Pipeline: compression must be one of"):
        check_compression("int8", "Pipeline")
