"""Weight constraints of the convolution, normalization, activation and attention layers
hold after each optimizer update as on Keras 3 (same weights, same data, same SGD steps), and
the arguments added beside them (BatchNormalization's renorm and synchronized, LayerNormalization's
rms_scaling, ConvLSTM's zero_output_for_mask, EinsumDense's quantization_config) behave and
round-trip as Keras's."""

import os
import warnings

os.environ.setdefault("KERAS_BACKEND", "torch")

import numpy as np  # noqa: E402
import pytest  # noqa: E402

import tapeflow as tp  # noqa: E402

keras = pytest.importorskip("keras")
RNG = np.random.default_rng(11)


def _conv2d(lib):
    return [
        lib.layers.Conv2D(3, 3, kernel_constraint=lib.constraints.MaxNorm(0.3), bias_constraint="non_neg"),
        lib.layers.Flatten(),
    ]


def _separable_conv2d(lib):
    return [
        lib.layers.SeparableConv2D(
            3,
            3,
            depth_multiplier=2,
            depthwise_constraint=lib.constraints.UnitNorm(axis=[0, 1]),
            pointwise_constraint="non_neg",
            bias_constraint=lib.constraints.MaxNorm(0.05, axis=0),
        ),
        lib.layers.Flatten(),
    ]


def _batch_normalization(lib):
    return [
        lib.layers.BatchNormalization(
            momentum=0.5, beta_constraint="non_neg", gamma_constraint=lib.constraints.MinMaxNorm(0.9, 1.0, axis=0)
        ),
        lib.layers.Flatten(),
    ]


def _prelu(lib):
    return [
        lib.layers.PReLU(
            alpha_initializer=lib.initializers.Constant(0.05),
            alpha_constraint="non_neg",
            shared_axes=[1, 2],
        ),
        lib.layers.Flatten(),
    ]


def _conv_lstm2d(lib):
    return [
        lib.layers.ConvLSTM2D(
            2,
            2,
            kernel_constraint=lib.constraints.MaxNorm(0.4, axis=[0, 1, 2]),
            recurrent_constraint=lib.constraints.UnitNorm(axis=[0, 1, 2]),
            bias_constraint="non_neg",
        ),
        lib.layers.Flatten(),
    ]


# (the layers, the input shape without the batch axis)
MODELS = {
    "Conv2D": (_conv2d, (5, 5, 2)),
    "SeparableConv2D": (_separable_conv2d, (5, 5, 2)),
    "BatchNormalization": (_batch_normalization, (4, 4, 3)),
    "PReLU": (_prelu, (4, 4, 3)),
    "ConvLSTM2D": (_conv_lstm2d, (3, 4, 4, 1)),
}


def _model(lib, name):
    make, input_shape = MODELS[name]
    return lib.Sequential([lib.Input(input_shape), *make(lib), lib.layers.Dense(2)])


@pytest.mark.parametrize("jit", [True, False])
@pytest.mark.parametrize("name", sorted(MODELS))
def test_constrained_layers_train_as_on_keras(name, jit):
    ours, theirs = _model(tp, name), _model(keras, name)
    weights = [RNG.normal(scale=0.5, size=w.shape).astype("float32") for w in theirs.get_weights()]
    ours.set_weights(weights)
    theirs.set_weights(weights)
    x = RNG.normal(size=(16, *MODELS[name][1])).astype("float32")
    y = RNG.normal(size=(16, 2)).astype("float32")
    ours.compile(tp.optimizers.SGD(0.1), "mse", jit=jit)
    theirs.compile(keras.optimizers.SGD(0.1), "mse")
    ours.fit(x, y, batch_size=8, epochs=1, shuffle=False, verbose=0)
    theirs.fit(x, y, batch_size=8, epochs=1, shuffle=False, verbose=0)
    for a, b in zip(ours.get_weights(), theirs.get_weights(), strict=True):
        np.testing.assert_allclose(a, b, rtol=1e-4, atol=1e-5)
    constrained = [w for w in ours.layers[0].weights if getattr(w, "constraint", None) is not None]
    assert constrained, f"{name}: no weight carries a constraint"
    for weight in constrained:  # each constraint holds on the trained value (it is its own fixed point)
        np.testing.assert_allclose(weight.constraint(weight).numpy(), weight.numpy(), rtol=1e-5, atol=1e-6)


def _constrained_layers():
    c = tp.constraints
    return [
        tp.layers.Conv1D(2, 3, kernel_constraint="max_norm", bias_constraint=c.NonNeg()),
        tp.layers.Conv1DTranspose(2, 3, kernel_constraint=c.UnitNorm(), bias_constraint="non_neg"),
        tp.layers.Conv2D(2, 3, kernel_constraint=c.MaxNorm(2.0)),
        tp.layers.Conv2DTranspose(2, 3, bias_constraint=c.MinMaxNorm(0.5, 1.0)),
        tp.layers.Conv3D(2, 2, kernel_constraint="non_neg"),
        tp.layers.Conv3DTranspose(2, 2, bias_constraint="unit_norm"),
        tp.layers.DepthwiseConv1D(3, depthwise_constraint="non_neg", bias_constraint=c.MaxNorm(1.0)),
        tp.layers.DepthwiseConv2D(3, depthwise_constraint=c.UnitNorm(axis=[0, 1])),
        tp.layers.SeparableConv1D(2, 3, depthwise_constraint="non_neg", pointwise_constraint=c.MaxNorm(1.5)),
        tp.layers.SeparableConv2D(2, 3, pointwise_constraint="unit_norm", bias_constraint="non_neg"),
        tp.layers.ConvLSTM1D(2, 2, kernel_constraint="max_norm", recurrent_constraint=c.UnitNorm()),
        tp.layers.ConvLSTM3D(2, 2, bias_constraint="non_neg", zero_output_for_mask=True),
        tp.layers.BatchNormalization(beta_constraint="non_neg", synchronized=True, renorm_momentum=0.9),
        tp.layers.BatchNormalization(gamma_constraint="unit_norm", renorm_clipping={"rmax": 3.0}),
        tp.layers.LayerNormalization(gamma_constraint=c.MaxNorm(3.0), rms_scaling=True),
        tp.layers.GroupNormalization(groups=2, beta_constraint=c.NonNeg(), gamma_constraint="unit_norm"),
        tp.layers.PReLU(alpha_constraint=c.MinMaxNorm(0.0, 0.5)),
        tp.layers.MultiHeadAttention(2, 3, kernel_constraint="max_norm", bias_constraint=c.NonNeg()),
        tp.layers.GroupQueryAttention(2, 2, 1, kernel_constraint=c.UnitNorm()),
        tp.layers.EinsumDense("ab,bc->ac", 3, bias_axes="c", kernel_constraint="non_neg", bias_constraint="max_norm"),
        tp.layers.Conv2D(2, 3, activity_regularizer="l2"),
    ]


@pytest.mark.parametrize("layer", _constrained_layers(), ids=lambda layer: type(layer).__name__)
def test_new_arguments_round_trip_through_the_config(layer):
    config = layer.get_config()
    clone = type(layer).from_config(config)
    assert clone.get_config() == config
    if config.get("synchronized"):
        return  # Keras takes synchronized=True on its TensorFlow backend only
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # Keras calls rms_scaling deprecated
        name = type(layer).__name__.replace("GroupedQuery", "GroupQuery")  # Keras's export name
        theirs = getattr(keras.layers, name).from_config(config)  # Keras reads the config too
    assert set(theirs.get_config()) == set(config)


def test_constraints_reach_the_weights_of_attention_projections():
    mha = tp.layers.MultiHeadAttention(2, 3, kernel_constraint="non_neg", bias_constraint=tp.constraints.MaxNorm(1.0))
    mha(tp.ones((1, 4, 6)), tp.ones((1, 5, 6)))
    for weight in mha.weights:
        kind = "NonNeg" if weight.name.endswith("kernel") else "MaxNorm"
        assert type(weight.constraint).__name__ == kind, weight.name


def test_layer_normalization_rms_scaling_matches_keras():
    x = RNG.normal(size=(3, 4, 5)).astype("float32")
    for kwargs in ({"rms_scaling": True}, {"axis": [1, 2], "rms_scaling": True, "center": True}):
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # Keras calls rms_scaling deprecated
            theirs = keras.layers.LayerNormalization(gamma_initializer="random_normal", **kwargs)
            theirs.build(x.shape)
        ours = tp.layers.LayerNormalization(**kwargs)
        ours.build(x.shape)
        assert [w.name.split("/")[-1] for w in ours.weights] == ["gamma"]
        ours.set_weights(theirs.get_weights())
        np.testing.assert_allclose(ours(tp.tensor(x)).numpy(), np.asarray(theirs(x).detach()), rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("go_backwards", [False, True])
@pytest.mark.parametrize("return_sequences", [False, True])
def test_conv_lstm_zero_output_for_mask_matches_keras(return_sequences, go_backwards):
    x = RNG.normal(size=(2, 4, 3, 3, 1)).astype("float32")
    mask = np.array([[True, True, False, False], [False, True, False, True]])  # a last step masked, one kept
    kwargs = dict(return_sequences=return_sequences, go_backwards=go_backwards, zero_output_for_mask=True)
    theirs = keras.layers.ConvLSTM2D(2, 2, return_state=True, **kwargs)
    theirs.build(x.shape)
    ours = tp.layers.ConvLSTM2D(2, 2, return_state=True, **kwargs)
    ours.build(x.shape)
    ours.set_weights(theirs.get_weights())
    expected = [np.asarray(t.detach()) for t in theirs(x, mask=mask)]
    got = [t.numpy() for t in ours(tp.tensor(x), mask=tp.tensor(mask))]
    for a, b in zip(got, expected, strict=True):
        np.testing.assert_allclose(a, b, rtol=1e-5, atol=1e-6)
    if return_sequences:  # the outputs come in the order the steps ran
        assert not got[0][~(mask[:, ::-1] if go_backwards else mask)].any()


def test_unsupported_settings_are_refused_by_name():
    with pytest.raises(NotImplementedError, match="renorm"):
        tp.layers.BatchNormalization(renorm=True)
    with pytest.raises(NotImplementedError, match="quantization_config"):
        tp.layers.EinsumDense("ab,bc->ac", 3, quantization_config={"mode": "int8"})
    with pytest.raises(ValueError, match="alpha_constraint"):
        tp.layers.PReLU(alpha_constraint="no_such_constraint")
