"""The volumetric, depthwise and separable convolutions and the 3-D and adaptive pooling
layers against Keras 3's (torch backend) in float64: with the same weights, the same outputs,
gradients (inputs and weights), weight shapes and get_weights order, and the same config keys."""

import os

os.environ.setdefault("KERAS_BACKEND", "torch")

import keras  # noqa: E402
import numpy as np  # noqa: E402
import pytest  # noqa: E402
from keras_compare import check_against_keras  # noqa: E402

import tapeflow as tp  # noqa: E402

torch = pytest.importorskip("torch")

L = tp.layers
FIRST = {"data_format": "channels_first"}

# (id, class name, kwargs, input shape)
CASES = [
    (
        "conv2d_first",
        "Conv2D",
        {"filters": 4, "kernel_size": (3, 2), "strides": 2, "padding": "same", "groups": 2, **FIRST},
        (2, 4, 5, 6),
    ),
    (
        "conv2d_transpose_first",
        "Conv2DTranspose",
        {"filters": 2, "kernel_size": 3, "strides": 2, "output_padding": 1, **FIRST},
        (1, 3, 3, 4),
    ),
    (
        "conv2d_transpose_same",
        "Conv2DTranspose",
        {"filters": 2, "kernel_size": 3, "strides": 2, "padding": "same"},
        (1, 3, 4, 2),
    ),
    ("max_pooling2d_first", "MaxPooling2D", {"pool_size": 3, "strides": 2, "padding": "same", **FIRST}, (2, 3, 5, 6)),
    ("average_pooling2d_first", "AveragePooling2D", {"pool_size": (2, 3), **FIRST}, (2, 2, 5, 6)),
    ("conv3d", "Conv3D", {"filters": 3, "kernel_size": 2}, (2, 3, 4, 3, 2)),
    (
        "conv3d_same_groups_first",
        "Conv3D",
        {"filters": 4, "kernel_size": (3, 2, 2), "strides": (2, 1, 2), "padding": "same", "groups": 2, **FIRST},
        (2, 4, 5, 4, 3),
    ),
    (
        "conv3d_dilated",
        "Conv3D",
        {"filters": 2, "kernel_size": 2, "dilation_rate": (2, 1, 1), "activation": "tanh"},
        (1, 4, 3, 3, 2),
    ),
    ("conv3d_transpose", "Conv3DTranspose", {"filters": 3, "kernel_size": 3, "strides": 2}, (2, 2, 3, 2, 2)),
    (
        "conv3d_transpose_same_first",
        "Conv3DTranspose",
        {"filters": 2, "kernel_size": (3, 2, 3), "strides": (2, 1, 2), "padding": "same", **FIRST},
        (1, 3, 2, 3, 2),
    ),
    (
        "conv3d_transpose_output_padding",
        "Conv3DTranspose",
        {"filters": 2, "kernel_size": 3, "strides": 2, "output_padding": 1},
        (1, 2, 2, 2, 2),
    ),
    ("depthwise_conv2d", "DepthwiseConv2D", {"kernel_size": 3}, (2, 5, 5, 3)),
    (
        "depthwise_conv2d_same_first",
        "DepthwiseConv2D",
        {"kernel_size": (2, 3), "strides": 2, "padding": "same", "depth_multiplier": 2, "activation": "relu", **FIRST},
        (2, 3, 5, 6),
    ),
    (
        "depthwise_conv1d_dilated",
        "DepthwiseConv1D",
        {"kernel_size": 3, "depth_multiplier": 2, "dilation_rate": 2},
        (2, 7, 2),
    ),
    (
        "depthwise_conv1d_first",
        "DepthwiseConv1D",
        {"kernel_size": 2, "strides": 2, "padding": "same", **FIRST},
        (2, 3, 7),
    ),
    ("separable_conv2d", "SeparableConv2D", {"filters": 4, "kernel_size": 3, "depth_multiplier": 2}, (2, 5, 5, 3)),
    (
        "separable_conv2d_same_first",
        "SeparableConv2D",
        {"filters": 2, "kernel_size": 2, "strides": 2, "padding": "same", **FIRST},
        (1, 3, 5, 5),
    ),
    (
        "separable_conv1d",
        "SeparableConv1D",
        {"filters": 3, "kernel_size": 3, "padding": "same", "activation": "tanh"},
        (2, 6, 2),
    ),
    (
        "separable_conv1d_first_no_bias",
        "SeparableConv1D",
        {"filters": 3, "kernel_size": 2, "depth_multiplier": 3, "use_bias": False, **FIRST},
        (2, 2, 6),
    ),
    ("max_pooling3d", "MaxPooling3D", {}, (2, 4, 5, 4, 2)),
    (
        "max_pooling3d_same_first",
        "MaxPooling3D",
        {"pool_size": (3, 2, 3), "strides": 2, "padding": "same", **FIRST},
        (1, 2, 5, 4, 5),
    ),
    ("average_pooling3d", "AveragePooling3D", {"pool_size": 2, "strides": 1}, (2, 3, 4, 3, 2)),
    # symmetric padding: Keras's torch backend pads unevenly split windows with edge copies
    ("average_pooling3d_same", "AveragePooling3D", {"pool_size": 3, "strides": 1, "padding": "same"}, (1, 3, 4, 3, 2)),
    ("average_pooling3d_first", "AveragePooling3D", {"pool_size": 2, **FIRST}, (1, 2, 4, 4, 4)),
    ("global_max_pooling3d", "GlobalMaxPooling3D", {}, (2, 3, 2, 3, 2)),
    ("global_average_pooling3d_first", "GlobalAveragePooling3D", {"keepdims": True, **FIRST}, (2, 3, 2, 3, 2)),
    ("adaptive_average_pooling1d", "AdaptiveAveragePooling1D", {"output_size": 3}, (2, 7, 3)),
    ("adaptive_max_pooling1d_first", "AdaptiveMaxPooling1D", {"output_size": 4, **FIRST}, (2, 3, 7)),
    ("adaptive_average_pooling2d", "AdaptiveAveragePooling2D", {"output_size": (3, 2)}, (2, 5, 7, 3)),
    ("adaptive_max_pooling2d", "AdaptiveMaxPooling2D", {"output_size": 3}, (2, 7, 5, 2)),
    (
        "adaptive_average_pooling3d_first",
        "AdaptiveAveragePooling3D",
        {"output_size": (2, 3, 2), **FIRST},
        (1, 2, 5, 4, 3),
    ),
    ("adaptive_max_pooling3d", "AdaptiveMaxPooling3D", {"output_size": 2}, (1, 3, 5, 4, 2)),
    ("conv_lstm2d", "ConvLSTM2D", {"filters": 2, "kernel_size": 3}, (2, 3, 5, 5, 2)),
    (
        "conv_lstm2d_same_strided_sequences_first",
        "ConvLSTM2D",
        {"filters": 3, "kernel_size": (2, 3), "padding": "same", "strides": 2, "return_sequences": True, **FIRST},
        (2, 3, 2, 5, 6),
    ),
    (
        "conv_lstm2d_dilated_backwards",
        "ConvLSTM2D",
        {"filters": 2, "kernel_size": 2, "dilation_rate": 2, "go_backwards": True, "return_sequences": True},
        (1, 3, 5, 4, 2),
    ),
    (
        "conv_lstm1d",
        "ConvLSTM1D",
        {"filters": 2, "kernel_size": 3, "padding": "same", "return_sequences": True},
        (2, 3, 5, 2),
    ),
    ("conv_lstm1d_first", "ConvLSTM1D", {"filters": 3, "kernel_size": 2, "strides": 2, **FIRST}, (2, 3, 2, 7)),
    ("conv_lstm3d", "ConvLSTM3D", {"filters": 2, "kernel_size": 2, "unit_forget_bias": False}, (1, 2, 3, 3, 3, 2)),
]

ALIASES = {
    "Convolution1D": "Conv1D",
    "Convolution1DTranspose": "Conv1DTranspose",
    "Convolution2D": "Conv2D",
    "Convolution2DTranspose": "Conv2DTranspose",
    "Convolution3D": "Conv3D",
    "Convolution3DTranspose": "Conv3DTranspose",
    "SeparableConvolution1D": "SeparableConv1D",
    "SeparableConvolution2D": "SeparableConv2D",
    "MaxPool1D": "MaxPooling1D",
    "MaxPool2D": "MaxPooling2D",
    "MaxPool3D": "MaxPooling3D",
    "AvgPool1D": "AveragePooling1D",
    "AvgPool2D": "AveragePooling2D",
    "AvgPool3D": "AveragePooling3D",
    "GlobalMaxPool1D": "GlobalMaxPooling1D",
    "GlobalMaxPool2D": "GlobalMaxPooling2D",
    "GlobalMaxPool3D": "GlobalMaxPooling3D",
    "GlobalAvgPool1D": "GlobalAveragePooling1D",
    "GlobalAvgPool2D": "GlobalAveragePooling2D",
    "GlobalAvgPool3D": "GlobalAveragePooling3D",
}


@pytest.mark.parametrize("name, kwargs, shape", [c[1:] for c in CASES], ids=[c[0] for c in CASES])
def test_matches_keras(rng, name, kwargs, shape):
    check_against_keras(rng, name, kwargs, shape)


@pytest.mark.parametrize("alias, name", ALIASES.items())
def test_aliases_are_keras_aliases_and_deserialize(alias, name):
    assert getattr(L, alias) is getattr(L, name)
    assert getattr(keras.layers, alias) is getattr(keras.layers, name)
    kwargs = (
        {"filters": 2, "kernel_size": 3} if "Conv" in name else {"pool_size": 2} if name.startswith("Average") else {}
    )
    config = {"class_name": alias, "config": getattr(L, alias)(name="x", **kwargs).get_config()}
    layer = L.deserialize(config)
    assert type(layer) is getattr(L, name) and layer.get_config() == config["config"]


def test_conv3d_in_a_sequential_model_trains():
    model = tp.Sequential(
        [
            tp.Input((4, 4, 4, 1)),
            L.Conv3D(2, 3, padding="same", activation="relu"),
            L.MaxPool3D(),
            L.GlobalAvgPool3D(),
            L.Dense(1),
        ]
    )
    model.compile(optimizer="sgd", loss="mse")
    x = np.random.default_rng(0).normal(size=(4, 4, 4, 4, 1)).astype("float32")
    history = model.fit(x, np.ones((4, 1), "float32"), epochs=2, verbose=0)
    assert len(history.history["loss"]) == 2


@pytest.mark.parametrize(
    "make, error, message",
    [
        (lambda: L.Conv3D(2, (3, 3), name="c"), ValueError, r"^c: kernel_size must be a positive int or a tuple of 3"),
        (lambda: L.Conv3D(2, 3, data_format="ndhwc", name="c"), ValueError, r"^c: data_format must be"),
        (lambda: L.Conv3D(2, 3, padding="causal", name="c"), ValueError, r"^c: padding must be 'valid' or 'same'"),
        (lambda: L.Conv3D(3, 3, groups=2, name="c"), ValueError, r"^c: groups must be a positive divisor"),
        (lambda: L.Conv3DTranspose(2, 3, strides=2, output_padding=2, name="c"), ValueError, r"^c: output_padding"),
        (lambda: L.DepthwiseConv2D(3, depth_multiplier=0, name="d"), ValueError, r"^d: depth_multiplier"),
        (lambda: L.SeparableConv1D(2, 3, padding="causal", name="s"), ValueError, r"^s: padding must be"),
        (lambda: L.MaxPooling3D((2, 2), name="p"), ValueError, r"^p: pool_size must be"),
        (lambda: L.AdaptiveAveragePooling2D((2, 2, 2), name="p"), TypeError, r"^p: output_size must be"),
        (lambda: L.AdaptiveMaxPooling1D(0, name="p"), TypeError, r"^p: output_size must be"),
    ],
)
def test_bad_arguments_are_named(make, error, message):
    with pytest.raises(error, match=message):
        make()


@pytest.mark.parametrize(
    "layer, shape, message",
    [
        (lambda: L.Conv3D(1, 3, name="c"), (1, 2, 4, 4, 1), r"^c: input size 2 is smaller than the window 3"),
        (lambda: L.MaxPooling3D(3, name="p"), (1, 4, 2, 4, 1), r"^p: input size 2 is smaller than the window 3"),
        (lambda: L.DepthwiseConv1D(4, name="d"), (1, 3, 2), r"^d: input size 3 is smaller than the window 4"),
    ],
)
def test_window_larger_than_the_input(layer, shape, message):
    with pytest.raises(ValueError, match=message):
        layer()(tp.ones(shape))


@pytest.mark.parametrize("data_format", ["channels_last", "channels_first"])
def test_conv_lstm2d_mask_and_initial_state_match_keras(rng, data_format):
    frame = (5, 4, 2) if data_format == "channels_last" else (2, 5, 4)
    state = (5, 4, 2) if data_format == "channels_last" else (2, 5, 4)
    x = rng.normal(size=(2, 4, *frame))
    kwargs = {"filters": 2, "kernel_size": 3, "padding": "same", "return_sequences": True, "return_state": True}
    kwargs["data_format"] = data_format
    ours = L.ConvLSTM2D(dtype="float64", **kwargs)
    ours(tp.tensor(x))
    weights = [0.3 * rng.normal(size=w.shape) for w in ours.get_weights()]
    ours.set_weights(weights)
    theirs = keras.layers.ConvLSTM2D(dtype="float64", **kwargs)
    theirs.build(x.shape)
    theirs.set_weights(weights)
    mask = np.array([[1, 1, 0, 1], [1, 0, 0, 1]], dtype=bool)
    states = [rng.normal(size=(2, *state)) for _ in range(2)]
    got = ours(tp.tensor(x), mask=tp.tensor(mask), initial_state=[tp.tensor(s) for s in states])
    want = theirs(torch.tensor(x), mask=torch.tensor(mask), initial_state=[torch.tensor(s) for s in states])
    for g, w in zip(got, want, strict=True):
        np.testing.assert_allclose(g.numpy(), w.detach().numpy(), rtol=1e-6, atol=1e-9)


@pytest.mark.parametrize(
    "kwargs, error, message",
    [
        ({"dropout": 0.2}, NotImplementedError, r"^l: dropout=0.2 is not supported"),
        ({"recurrent_dropout": 0.1}, NotImplementedError, r"^l: recurrent_dropout=0.1 is not supported"),
        ({"strides": 2, "dilation_rate": 2}, ValueError, r"^l: strides > 1 cannot be combined with dilation_rate > 1"),
        ({"padding": "causal"}, ValueError, r"^l: padding must be 'valid' or 'same'"),
    ],
)
def test_conv_lstm_refuses_what_it_does_not_do(kwargs, error, message):
    with pytest.raises(error, match=message):
        L.ConvLSTM2D(2, 3, name="l", **kwargs)
