"""STFTSpectrogram and MelSpectrogram against Keras 3's (torch backend): outputs in float32,
outputs and gradients (input and kernels) in float64, configs, and errors."""

import os

os.environ.setdefault("KERAS_BACKEND", "torch")

import keras  # noqa: E402
import numpy as np  # noqa: E402
import pytest  # noqa: E402
from keras_compare import check_against_keras  # noqa: E402

import tapeflow as tp  # noqa: E402

torch = pytest.importorskip("torch")

STFT_CASES = [
    ("log", {"mode": "log", "frame_length": 16, "fft_length": 16}, (2, 64, 3)),
    ("psd_same", {"mode": "psd", "frame_length": 12, "frame_step": 5, "padding": "same"}, (2, 64, 1)),
    (
        "stft_first_expand",
        {
            "mode": "stft",
            "frame_length": 16,
            "window": "hamming",
            "expand_dims": True,
            "data_format": "channels_first",
            "scaling": "spectrum",
            "periodic": True,
        },
        (2, 3, 64),
    ),
    ("magnitude_expand", {"mode": "magnitude", "frame_length": 10, "frame_step": 3, "expand_dims": True}, (2, 40, 2)),
    ("real_no_window", {"mode": "real", "frame_length": 8, "window": None}, (1, 30, 2)),
    ("imag_first", {"mode": "imag", "frame_length": 8, "scaling": None, "data_format": "channels_first"}, (2, 2, 30)),
    ("angle", {"mode": "angle", "frame_length": 8}, (2, 30, 1)),
]

MEL_CASES = [
    ("default_db", {"fft_length": 64, "sequence_stride": 16, "num_mel_bins": 10}, (2, 400)),
    (
        "power_hamming",
        {
            "fft_length": 64,
            "sequence_length": 40,
            "sequence_stride": 10,
            "window": "hamming",
            "power_to_db": False,
            "mag_exp": 1.0,
            "sampling_rate": 8000,
            "min_freq": 100.0,
            "max_freq": 3000.0,
        },
        (2, 300),
    ),
    ("one_signal_ref", {"fft_length": 32, "sequence_stride": 8, "num_mel_bins": 8, "ref_power": 2.0}, (100,)),
]


def _keras_out(layer, x):
    return np.asarray(layer(x).detach().cpu())


@pytest.mark.parametrize("kwargs, shape", [c[1:] for c in STFT_CASES], ids=[c[0] for c in STFT_CASES])
def test_stft_spectrogram_float32_matches_keras(kwargs, shape):
    x = np.random.default_rng(0).normal(size=shape).astype("float32")
    named = {**kwargs, "name": "stft"}  # one name: default names count the layers a process made before
    ours, theirs = tp.layers.STFTSpectrogram(**named), keras.layers.STFTSpectrogram(**named)
    out, ref = ours(x).numpy(), _keras_out(theirs, x)
    assert out.shape == ref.shape == ours.compute_output_shape(shape) == theirs.compute_output_shape(shape)
    if kwargs["mode"] == "angle":  # the DC and Nyquist bins sit on the branch cut: compare on the circle
        out, ref = np.exp(1j * out), np.exp(1j * ref)
    np.testing.assert_allclose(out, ref, rtol=1e-4, atol=2e-5)
    assert ours.get_config() | {"dtype": None} == theirs.get_config() | {"dtype": None}


@pytest.mark.parametrize("kwargs, shape", [c[1:] for c in STFT_CASES[:-1]], ids=[c[0] for c in STFT_CASES[:-1]])
def test_stft_spectrogram_float64_gradients_match_keras(kwargs, shape):
    check_against_keras(np.random.default_rng(1), "STFTSpectrogram", kwargs, shape)


@pytest.mark.parametrize("kwargs, shape", [c[1:] for c in MEL_CASES], ids=[c[0] for c in MEL_CASES])
def test_mel_spectrogram_float32_matches_keras(kwargs, shape):
    x = np.random.default_rng(2).normal(size=shape).astype("float32")
    named = {**kwargs, "name": "mel"}  # one name: default names count the layers a process made before
    ours, theirs = tp.layers.MelSpectrogram(**named), keras.layers.MelSpectrogram(**named)
    out, ref = ours(x).numpy(), _keras_out(theirs, x)
    assert out.shape == ref.shape == ours.compute_output_shape(shape)
    np.testing.assert_allclose(out, ref, rtol=1e-4, atol=1e-4 * np.abs(ref).max())
    assert ours.get_config() | {"dtype": None} == theirs.get_config() | {"dtype": None}


@pytest.mark.parametrize("kwargs, shape", [c[1:] for c in MEL_CASES], ids=[c[0] for c in MEL_CASES])
def test_mel_spectrogram_float64_gradients_match_keras(kwargs, shape):
    # Keras builds its mel filters in float32 whatever the layer's dtype: agreement to ~1e-5
    rng = np.random.default_rng(3)
    x = rng.normal(size=shape)
    ours, theirs = (
        tp.layers.MelSpectrogram(dtype="float64", **kwargs),
        keras.layers.MelSpectrogram(dtype="float64", **kwargs),
    )
    xt = tp.tensor(x)
    with tp.GradientTape() as tape:
        tape.watch(xt)
        out = ours(xt)
        proj = rng.normal(size=out.shape)
        loss = tp.sum(out * tp.tensor(proj))
    grad = tape.gradient(loss, xt).numpy()
    xk = torch.tensor(x, requires_grad=True)
    ref = theirs(xk)
    (ref * torch.tensor(proj)).sum().backward()
    ref = ref.detach().numpy()
    np.testing.assert_allclose(out.numpy(), ref, rtol=1e-4, atol=1e-4 * np.abs(ref).max())
    np.testing.assert_allclose(grad, xk.grad.numpy(), rtol=1e-3, atol=1e-4 * np.abs(grad).max())


def test_spectrogram_errors():
    with pytest.raises(ValueError, match="frame_step"):
        tp.layers.STFTSpectrogram(frame_length=8, frame_step=9)
    with pytest.raises(ValueError, match="fft_length"):
        tp.layers.STFTSpectrogram(frame_length=8, fft_length=4)
    with pytest.raises(ValueError, match="mode"):
        tp.layers.STFTSpectrogram(mode="power")
    with pytest.raises(ValueError, match="scaling"):
        tp.layers.STFTSpectrogram(scaling="unit")
    with pytest.raises(ValueError, match="padding"):
        tp.layers.STFTSpectrogram(padding="causal")
    with pytest.warns(UserWarning, match="power of two"):
        tp.layers.STFTSpectrogram(frame_length=8, fft_length=12)
    with pytest.raises(TypeError, match="float"):
        tp.layers.STFTSpectrogram(frame_length=8)(tp.ones((1, 16, 1), dtype="int32"))
    with pytest.raises(ValueError, match="ndim|rank"):
        tp.layers.STFTSpectrogram(frame_length=8)(tp.ones((16, 1)))
    with pytest.raises(ValueError, match="sequence_length"):
        tp.layers.MelSpectrogram(fft_length=16, sequence_length=32)
    with pytest.raises(ValueError, match="window"):
        tp.layers.MelSpectrogram(window="blackman")
    with pytest.raises(ValueError, match="signal"):
        tp.layers.MelSpectrogram(fft_length=16, sequence_stride=4)(tp.ones((1, 2, 64)))


def test_stft_spectrogram_frozen_trainable_kernels():
    layer = tp.layers.STFTSpectrogram(frame_length=8, trainable=False)
    x = tp.tensor(np.random.default_rng(4).normal(size=(2, 32, 1)).astype("float32"))
    eager = layer(x).numpy()
    assert [w.name.split("/")[-1] for w in layer.weights] == ["real_kernel", "imag_kernel"]
    assert layer.trainable_weights == []
    frozen = tp.function(lambda signals: layer(signals))
    np.testing.assert_allclose(frozen(x).numpy(), eager, rtol=1e-6, atol=1e-6)
