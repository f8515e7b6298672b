"""UpSampling, ZeroPadding, Cropping, RepeatVector and Permute against Keras 3's (torch
backend) in float64 (outputs, input gradients, configs), and their errors."""

import os

os.environ.setdefault("KERAS_BACKEND", "torch")

import numpy as np  # noqa: E402
import pytest  # noqa: E402
from keras_compare import check_against_keras  # noqa: E402

import tapeflow as tp  # noqa: E402

L = tp.layers
FIRST = {"data_format": "channels_first"}

# (id, class name, kwargs, input shape)
CASES = [
    ("up_sampling1d", "UpSampling1D", {"size": 3}, (2, 3, 2)),
    ("up_sampling2d", "UpSampling2D", {"size": (2, 3)}, (2, 3, 2, 2)),
    ("up_sampling2d_bilinear_first", "UpSampling2D", {"size": 2, "interpolation": "bilinear", **FIRST}, (2, 2, 3, 4)),
    ("up_sampling2d_bicubic", "UpSampling2D", {"size": (3, 2), "interpolation": "bicubic"}, (1, 3, 4, 2)),
    ("up_sampling3d_first", "UpSampling3D", {"size": (1, 2, 3), **FIRST}, (1, 2, 2, 3, 2)),
    ("zero_padding1d", "ZeroPadding1D", {"padding": (1, 2)}, (2, 3, 2)),
    ("zero_padding1d_first", "ZeroPadding1D", {"padding": 2, **FIRST}, (2, 3, 2)),
    ("zero_padding2d", "ZeroPadding2D", {"padding": ((1, 0), (2, 1))}, (2, 3, 2, 2)),
    ("zero_padding2d_first", "ZeroPadding2D", {"padding": (1, 2), **FIRST}, (2, 2, 3, 2)),
    ("zero_padding3d", "ZeroPadding3D", {"padding": (1, 0, 2)}, (1, 2, 2, 3, 2)),
    ("cropping1d", "Cropping1D", {"cropping": (1, 2)}, (2, 5, 2)),
    ("cropping2d", "Cropping2D", {"cropping": ((1, 0), (1, 2))}, (2, 4, 5, 2)),
    ("cropping2d_first", "Cropping2D", {"cropping": 1, **FIRST}, (2, 2, 4, 5)),
    ("cropping3d", "Cropping3D", {"cropping": (1, 0, 2)}, (1, 4, 3, 5, 2)),
    ("repeat_vector", "RepeatVector", {"n": 3}, (2, 4)),
    ("permute", "Permute", {"dims": (3, 1, 2)}, (2, 3, 4, 5)),
]


@pytest.mark.parametrize("name, kwargs, shape", [c[1:] for c in CASES], ids=[c[0] for c in CASES])
def test_matches_keras(rng, name, kwargs, shape):
    check_against_keras(rng, name, kwargs, shape)


def test_values():
    x = tp.reshape(tp.arange(6.0), (1, 2, 3, 1))

    def grid(layer):
        return layer(x).numpy()[0, :, :, 0].tolist()

    assert grid(L.UpSampling2D((1, 2))) == [[0, 0, 1, 1, 2, 2], [3, 3, 4, 4, 5, 5]]
    assert grid(L.Cropping2D(((0, 1), (1, 0)))) == [[1, 2]]
    assert grid(L.ZeroPadding2D(((0, 0), (1, 0)))) == [[0, 0, 1, 2], [0, 3, 4, 5]]
    assert grid(L.Permute((2, 1, 3))) == [[0, 3], [1, 4], [2, 5]]


def test_reshaping_in_a_functional_model():
    inputs = tp.Input((4, 4, 2))
    y = L.Cropping2D(1)(L.ZeroPadding2D(2)(L.UpSampling2D()(inputs)))
    outputs = L.Permute((3, 1, 2))(y)
    assert outputs.shape == (None, 2, 10, 10)
    x = np.random.default_rng(0).normal(size=(2, 4, 4, 2)).astype("float32")
    expected = np.repeat(np.repeat(x, 2, 1), 2, 2).transpose(0, 3, 1, 2)
    got = tp.Model(inputs, outputs).predict(x, verbose=0)
    np.testing.assert_array_equal(got[:, :, 1:9, 1:9], expected)


@pytest.mark.parametrize(
    "make, error, message",
    [
        (lambda: L.ZeroPadding2D((1, 2, 3), name="z"), ValueError, r"^z: padding must be an int, 2 ints or 2 pairs"),
        (lambda: L.ZeroPadding1D(-1, name="z"), ValueError, r"^z: padding"),
        (lambda: L.Cropping3D(((1, 2), (1,), 1), name="c"), ValueError, r"^c: cropping must be"),
        (
            lambda: L.UpSampling2D(interpolation="lanczos3", name="u"),
            NotImplementedError,
            r"^u: interpolation='lanczos3'",
        ),
        (lambda: L.UpSampling2D(interpolation="cubic", name="u"), ValueError, r"^u: interpolation must be one of"),
        (lambda: L.UpSampling3D(0, name="u"), ValueError, r"^u: size"),
        (lambda: L.RepeatVector(0, name="r"), ValueError, r"^r: n"),
        (lambda: L.Permute((0, 1), name="p"), ValueError, r"^p: dims must be a permutation of 1 \.\. n"),
        (lambda: L.Permute((1, 3), name="p"), ValueError, r"^p: dims must be a permutation"),
        (lambda: L.Cropping2D(data_format="nhwc", name="c"), ValueError, r"^c: data_format must be"),
    ],
)
def test_bad_arguments_are_named(make, error, message):
    with pytest.raises(error, match=message):
        make()


def test_cropping_more_than_the_input():
    with pytest.raises(ValueError, match=r"^c: cropping \(\(2, 2\),\) leaves nothing of axis 1"):
        L.Cropping1D(2, name="c")(tp.ones((1, 4, 2)))


def test_input_rank_is_checked():
    with pytest.raises(ValueError, match="r"):
        L.RepeatVector(2, name="r")(tp.ones((2, 3, 4)))
