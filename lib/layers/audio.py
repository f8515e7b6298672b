"""Audio layers: STFTSpectrogram (a short-time Fourier transform computed as a strided
convolution with DFT kernels, so the kernels can be trained) and MelSpectrogram (a
log-scaled mel spectrogram from the STFT op).

>>> import tapeflow as tp
>>> tp.layers.STFTSpectrogram(frame_length=8, fft_length=8)(tp.ones((1, 32, 1))).shape
(1, 7, 5)
"""

from __future__ import annotations

import math
import warnings

import numpy as np

from tapeflow import initializers
from tapeflow.layers.base import InputSpec, Layer
from tapeflow.layers.conv import data_format_of
from tapeflow.ops.array import concat, pad, reshape
from tapeflow.ops.core import cast, transpose
from tapeflow.ops.creation import tensor as constant
from tapeflow.ops.math import log, maximum, sqrt, square, stft
from tapeflow.ops.nn import keras_functions
from tapeflow.ops.numpy import arctan2, tensordot
from tapeflow.ops.reduce import max as reduce_max
from tapeflow.ops.shapes import window_output_size

_EPSILON = 1e-7  # Keras's backend.epsilon()
_MODES = ("log", "magnitude", "psd", "real", "imag", "angle", "stft")
_FLOATS = ("float16", "float32", "float64")


def _check_float(layer: str, inputs) -> None:
    if inputs.dtype.name not in _FLOATS:
        raise TypeError(f"{layer}: expected a float16, float32 or float64 input, got {inputs.dtype}")


class STFTSpectrogram(Layer):
    """The spectrogram of each channel of [batch, time, channels] signals, from a
    short-time Fourier transform computed as a strided convolution whose DFT kernels
    (`real_kernel`, `imag_kernel`, from `tp.initializers.STFT`) are weights.

    Args:
        mode: "log" (default; log magnitude), "magnitude", "psd" (power spectral density),
            "real", "imag", "angle", or "stft" (real then imaginary bins).
        frame_length: the samples in each frame. Default 256.
        frame_step: the hop between frames, in [1, frame_length]; None for frame_length // 2.
        fft_length: the FFT size (>= frame_length); None for the next power of two.
        window: "hann" (default), "hamming", another scipy window name, an array, or None.
        periodic: whether the named window is periodic. Default False.
        scaling: "density" (default), "spectrum", or None: how the window is normalised.
        padding: "valid" (default) or "same".
        expand_dims: if True, the bins and channels are separate axes (an image per signal).
        data_format: "channels_last" (default) or "channels_first".
        **kwargs: the base layer's arguments (`name`, `trainable`, `dtype`, `input_shape`).

    >>> import tapeflow as tp
    >>> layer = tp.layers.STFTSpectrogram(mode="magnitude", frame_length=8, fft_length=8, expand_dims=True)
    >>> layer(tp.ones((2, 32, 3))).shape
    (2, 7, 5, 3)
    """

    def __init__(
        self,
        mode="log",
        frame_length=256,
        frame_step=None,
        fft_length=None,
        window="hann",
        periodic=False,
        scaling="density",
        padding="valid",
        expand_dims=False,
        data_format=None,
        **kwargs,
    ):
        super().__init__(**kwargs)
        if not isinstance(frame_length, int) or frame_length < 1:
            raise ValueError(f"{self.name}: frame_length must be a positive int, got {frame_length!r}")
        if frame_step is not None and (not isinstance(frame_step, int) or not 1 <= frame_step <= frame_length):
            raise ValueError(
                f"{self.name}: frame_step must be a positive int not greater than frame_length ({frame_length}), "
                f"got {frame_step!r}"
            )
        if fft_length is not None and (not isinstance(fft_length, int) or fft_length < frame_length):
            raise ValueError(
                f"{self.name}: fft_length must be an int not less than frame_length ({frame_length}), "
                f"got {fft_length!r}"
            )
        if fft_length is not None and fft_length & (fft_length - 1):
            warnings.warn(f"{self.name}: fft_length is best a power of two, got {fft_length}", stacklevel=2)
        if mode not in _MODES:
            raise ValueError(f"{self.name}: mode must be one of {', '.join(_MODES)}, got {mode!r}")
        if padding not in ("valid", "same"):
            raise ValueError(f"{self.name}: padding must be 'valid' or 'same', got {padding!r}")
        # an unknown window name or scaling raises here
        initializers.STFT("real", window, scaling, periodic)
        self.mode = mode
        self.frame_length = frame_length
        self.frame_step = frame_step
        self.fft_length = fft_length
        self._frame_step = frame_step or frame_length // 2
        self._fft_length = fft_length or 2 ** math.ceil(math.log2(frame_length))
        self.window = window
        self.periodic = periodic
        self.scaling = scaling
        self.padding = padding
        self.expand_dims = expand_dims
        self.data_format = data_format_of(self.name, data_format)
        self.input_spec = InputSpec(ndim=3)

    def build(self, input_shape):
        shape = (self.frame_length, 1, self._fft_length // 2 + 1)

        def kernel(side):
            initializer = initializers.STFT(side, self.window, self.scaling, self.periodic)
            return self.add_weight(name=f"{side}_kernel", shape=shape, initializer=initializer)

        if self.mode != "imag":
            self.real_kernel = kernel("real")
        if self.mode != "real":
            self.imag_kernel = kernel("imag")

    def _convolve(self, signals, kernel):
        """[batch * channels, time, 1] signals convolved with `kernel`: [batch * channels, frames, bins]."""
        return keras_functions.conv(
            signals, cast(kernel, signals.dtype), strides=self._frame_step, padding=self.padding
        )

    def _arrange(self, spectra, batch: int, channels: int):
        """[batch * channels, frames, bins] spectra in the layer's output layout."""
        frames, bins = spectra.shape[1], spectra.shape[2]
        spectra = reshape(spectra, (batch, channels, frames, bins))
        if self.data_format == "channels_last":
            if self.expand_dims:
                return transpose(spectra, (0, 2, 3, 1))
            return reshape(transpose(spectra, (0, 2, 1, 3)), (batch, frames, channels * bins))
        if self.expand_dims:
            return spectra
        return reshape(transpose(spectra, (0, 1, 3, 2)), (batch, channels * bins, frames))

    def call(self, inputs):
        _check_float(self.name, inputs)
        signals = inputs if self.data_format == "channels_first" else transpose(inputs, (0, 2, 1))
        batch, channels, time = signals.shape
        window_output_size(
            self.name, 1, time, 1, self.frame_length, (1, self._frame_step), self.padding.upper(), (1, 1)
        )
        batch = -1 if batch is None else batch
        signals = reshape(signals, (-1, time, 1))
        real = imag = None
        if self.mode != "imag":
            real = self._convolve(signals, self.real_kernel)
        if self.mode != "real":
            imag = self._convolve(signals, self.imag_kernel)
        if self.mode == "real":
            return self._arrange(real, batch, channels)
        if self.mode == "imag":
            return self._arrange(imag, batch, channels)
        if self.mode == "angle":
            return self._arrange(arctan2(imag, real), batch, channels)
        if self.mode == "stft":
            return self._arrange(concat([real, imag], axis=2), batch, channels)
        power = square(real) + square(imag)
        if self.mode == "psd":
            # the bins between DC and Nyquist stand for their mirror images too
            return self._arrange(power + pad(power[:, :, 1:-1], [[0, 0], [0, 0], [1, 1]]), batch, channels)
        magnitude = sqrt(maximum(power, _EPSILON))
        if self.mode == "magnitude":
            return self._arrange(magnitude, batch, channels)
        return self._arrange(log(maximum(magnitude, _EPSILON)), batch, channels)

    def compute_output_shape(self, input_shape):
        batch = input_shape[0]
        if self.data_format == "channels_last":
            time, channels = input_shape[1], input_shape[2]
        else:
            channels, time = input_shape[1], input_shape[2]
        bins = (self._fft_length // 2 + 1) * (2 if self.mode == "stft" else 1)
        if time is None:
            frames = None
        elif self.padding == "same":
            frames = -(-time // self._frame_step)
        else:
            frames = (time - self.frame_length) // self._frame_step + 1
        if self.expand_dims:
            if self.data_format == "channels_last":
                return (batch, frames, bins, channels)
            return (batch, channels, frames, bins)
        flat = None if channels is None else channels * bins
        return (batch, frames, flat) if self.data_format == "channels_last" else (batch, flat, frames)

    def get_config(self):
        window = self.window.tolist() if isinstance(self.window, np.ndarray) else self.window
        return {
            **super().get_config(),
            "mode": self.mode,
            "frame_length": self.frame_length,
            "frame_step": self.frame_step,
            "fft_length": self.fft_length,
            "window": window,
            "periodic": self.periodic,
            "scaling": self.scaling,
            "padding": self.padding,
            "data_format": self.data_format,
            "expand_dims": self.expand_dims,
        }


_MEL_BREAK_HERTZ = 700.0
_MEL_HIGH_Q = 1127.0


def _hertz_to_mel(hertz):
    return _MEL_HIGH_Q * np.log(1.0 + hertz / _MEL_BREAK_HERTZ)


def mel_weight_matrix(num_mel_bins: int, num_spectrogram_bins: int, sampling_rate, low_hertz, high_hertz) -> np.ndarray:
    """The [num_spectrogram_bins, num_mel_bins] matrix of triangular HTK mel filters (peak
    1) over the linear bins of [0, sampling_rate / 2]; the DC bin gets no weight.

    >>> mel_weight_matrix(2, 5, 8000, 0.0, 4000.0).shape
    (5, 2)
    """
    bins = _hertz_to_mel(np.linspace(0.0, sampling_rate / 2.0, num_spectrogram_bins)[1:])[:, None]
    edges = np.linspace(_hertz_to_mel(float(low_hertz)), _hertz_to_mel(float(high_hertz)), num_mel_bins + 2)
    lower, center, upper = edges[None, :-2], edges[None, 1:-1], edges[None, 2:]
    rising = (bins - lower) / (center - lower)
    falling = (upper - bins) / (upper - center)
    weights = np.maximum(0.0, np.minimum(rising, falling))
    return np.pad(weights, [[1, 0], [0, 0]])


class MelSpectrogram(Layer):
    """The mel spectrogram of [time] or [batch, time] signals, as [num_mel_bins, frames]
    or [batch, num_mel_bins, frames]: STFT magnitudes raised to `mag_exp`, summed by
    triangular mel filters, and (with `power_to_db`) in decibels clipped `top_db` below the
    largest value of the whole batch.

    Args:
        fft_length: the FFT size. Default 2048.
        sequence_stride: the hop between frames. Default 512.
        sequence_length: the window length (<= fft_length); None for fft_length.
        window: "hann" (default), "hamming", or None.
        sampling_rate: the signal's samples per second. Default 16000.
        num_mel_bins: the mel bands. Default 128.
        min_freq: the lowest band edge in hertz. Default 20.
        max_freq: the highest band edge; None for sampling_rate / 2.
        power_to_db: whether to convert to decibels. Default True.
        top_db: the dynamic range kept in decibels. Default 80.
        mag_exp: the exponent of the magnitudes (2 for power). Default 2.
        min_power: the floor of the power before the logarithm. Default 1e-10.
        ref_power: the power of 0 dB. Default 1.
        **kwargs: the base layer's arguments (`name`, `trainable`, `dtype`, `input_shape`).

    >>> import tapeflow as tp
    >>> layer = tp.layers.MelSpectrogram(fft_length=64, sequence_stride=16, num_mel_bins=10)
    >>> layer(tp.ones((2, 128))).shape
    (2, 10, 9)
    """

    def __init__(
        self,
        fft_length=2048,
        sequence_stride=512,
        sequence_length=None,
        window="hann",
        sampling_rate=16000,
        num_mel_bins=128,
        min_freq=20.0,
        max_freq=None,
        power_to_db=True,
        top_db=80.0,
        mag_exp=2.0,
        min_power=1e-10,
        ref_power=1.0,
        **kwargs,
    ):
        super().__init__(**kwargs)
        self.fft_length = fft_length
        self.sequence_stride = sequence_stride
        self.sequence_length = sequence_length or fft_length
        if self.fft_length < self.sequence_length:
            raise ValueError(
                f"{self.name}: fft_length must be >= sequence_length, got sequence_length={self.sequence_length}, "
                f"fft_length={self.fft_length}"
            )
        if window is not None and window not in ("hann", "hamming"):
            raise ValueError(f"{self.name}: window must be 'hann', 'hamming' or None, got {window!r}")
        self.window = window
        self.sampling_rate = sampling_rate
        self.num_mel_bins = num_mel_bins
        self.min_freq = min_freq
        self.max_freq = max_freq or int(sampling_rate / 2)
        self.power_to_db = power_to_db
        self.top_db = top_db
        self.mag_exp = mag_exp
        self.min_power = min_power
        self.ref_power = ref_power

    def call(self, inputs):
        _check_float(self.name, inputs)
        if inputs.ndim not in (1, 2):
            raise ValueError(f"{self.name}: expected a [time] or [batch, time] signal, got shape {inputs.shape}")
        dtype = inputs.dtype
        signals = inputs if dtype.name in ("float32", "float64") else cast(inputs, "float32")
        real, imag = stft(
            signals, self.sequence_length, self.sequence_stride, self.fft_length, window=self.window, center=True
        )
        spectra = sqrt(square(real) + square(imag)) ** self.mag_exp
        matrix = mel_weight_matrix(
            self.num_mel_bins, spectra.shape[-1], self.sampling_rate, self.min_freq, self.max_freq
        )
        mel = tensordot(spectra, matrix.astype(signals.dtype.np), axes=1)
        if self.power_to_db:
            floor = 10.0 * math.log10(max(abs(float(self.ref_power)), self.min_power))
            decibels = 10.0 / math.log(10.0) * log(maximum(mel, self.min_power)) - floor
            # the loudest value of the whole batch; -inf (no floor) for an empty batch
            loudest = reduce_max(concat([reshape(decibels, (-1,)), constant([-math.inf], decibels.dtype)], axis=0))
            mel = maximum(decibels, loudest - self.top_db)
        mel = transpose(mel, (*range(mel.ndim - 2), mel.ndim - 1, mel.ndim - 2))
        return mel if mel.dtype is dtype else cast(mel, dtype)

    def compute_output_shape(self, input_shape):
        time = input_shape[-1]
        frames = None if time is None else 1 + time // self.sequence_stride
        return (*input_shape[:-1], self.num_mel_bins, frames)

    def get_config(self):
        return {
            **super().get_config(),
            "fft_length": self.fft_length,
            "sequence_stride": self.sequence_stride,
            "sequence_length": self.sequence_length,
            "window": self.window,
            "sampling_rate": self.sampling_rate,
            "num_mel_bins": self.num_mel_bins,
            "min_freq": self.min_freq,
            "max_freq": self.max_freq,
            "power_to_db": self.power_to_db,
            "top_db": self.top_db,
            "mag_exp": self.mag_exp,
            "min_power": self.min_power,
            "ref_power": self.ref_power,
        }
