"""Weight initializers, Keras style: `init(shape, dtype="float32") -> Tensor`.

Fans follow Keras: a dense kernel [in, out] has fan_in = in and fan_out = out;
a convolution filter [kh, kw, in, out] (HWIO) multiplies both by kh * kw.
A random initializer with an int `seed` gives the same values on every call
(as in Keras 3); with a tp.random.Generator it draws on from that stream, and
with no seed from the global stream (`tp.random.seed`).

>>> import tapeflow as tp
>>> w = tp.initializers.GlorotUniform(seed=0)((784, 10))
>>> w.shape, w.dtype, bool(tp.max(tp.abs(w)) <= (6 / (784 + 10)) ** 0.5)
((784, 10), tapeflow.float32, True)
>>> compute_fans((3, 3, 16, 32))
(144, 288)
"""

from __future__ import annotations

import math

import numpy as np

from tapeflow import dtypes, serialization
from tapeflow.ops import random as tprandom
from tapeflow.ops.creation import eye, full, tensor
from tapeflow.tensor import Tensor

__all__ = [
    "Initializer",
    "Zeros",
    "Ones",
    "Constant",
    "Identity",
    "RandomNormal",
    "RandomUniform",
    "TruncatedNormal",
    "VarianceScaling",
    "GlorotUniform",
    "GlorotNormal",
    "HeNormal",
    "HeUniform",
    "LecunNormal",
    "LecunUniform",
    "Orthogonal",
    "STFT",
    "IdentityInitializer",
    "OrthogonalInitializer",
    "STFTInitializer",
    "constant",
    "glorot_normal",
    "glorot_uniform",
    "he_normal",
    "he_uniform",
    "identity",
    "lecun_normal",
    "lecun_uniform",
    "ones",
    "orthogonal",
    "random_normal",
    "random_uniform",
    "stft",
    "truncated_normal",
    "variance_scaling",
    "zeros",
    "compute_fans",
    "get",
    "serialize",
    "deserialize",
]

# The standard deviation of a unit normal truncated to [-2, 2]: dividing by it
# gives truncated samples the variance asked for.
_TRUNCATED_STDDEV = 0.87962566103423978


def compute_fans(shape) -> tuple[int, int]:
    """(fan_in, fan_out) of a weight shape: [n] -> (n, n), [in, out], or
    [..., in, out] for convolution filters (times the receptive field size).

    >>> compute_fans((5, 7)), compute_fans(())
    ((5, 7), (1, 1))
    """
    shape = tuple(int(d) for d in shape)
    if len(shape) == 0:
        return 1, 1
    if len(shape) == 1:
        return shape[0], shape[0]
    receptive = math.prod(shape[:-2])
    return shape[-2] * receptive, shape[-1] * receptive


def _float_dtype(owner: str, dtype) -> str:
    d = dtypes.as_dtype(dtype or "float32")
    if d.kind != "f":
        raise TypeError(f"{owner}: needs a floating-point dtype, got {d}")
    return d.name


class Initializer:
    """Base class: `__call__(shape, dtype)` and `get_config()`."""

    def __call__(self, shape, dtype=None) -> Tensor:
        raise NotImplementedError(f"{type(self).__name__} must implement __call__(shape, dtype)")

    def get_config(self) -> dict:
        return {}

    @classmethod
    def from_config(cls, config: dict) -> Initializer:
        return cls(**config)

    def __repr__(self) -> str:
        args = ", ".join(f"{k}={v!r}" for k, v in self.get_config().items())
        return f"{type(self).__name__}({args})"


class _Seeded(Initializer):
    def __init__(self, seed=None):
        if not (seed is None or isinstance(seed, int | tprandom.Generator)) or isinstance(seed, bool):
            raise TypeError(f"{type(self).__name__}: seed must be an int, a tp.random.Generator or None, got {seed!r}")
        self.seed = seed

    def _generator(self):
        """A fresh stream for an int seed (same values each call), else the given one."""
        return tprandom.Generator(self.seed) if isinstance(self.seed, int) else self.seed

    def get_config(self) -> dict:
        return {"seed": self.seed if not isinstance(self.seed, tprandom.Generator) else None}


class Zeros(Initializer):
    """All zeros.

    >>> Zeros()((2,)).numpy().tolist()
    [0.0, 0.0]
    """

    def __call__(self, shape, dtype=None) -> Tensor:
        return full(shape, 0, dtype or "float32")


class Ones(Initializer):
    """All ones.

    >>> Ones()((2,), "int32").numpy().tolist()
    [1, 1]
    """

    def __call__(self, shape, dtype=None) -> Tensor:
        return full(shape, 1, dtype or "float32")


class Constant(Initializer):
    """Every element `value`.

    >>> Constant(0.5)((2,)).numpy().tolist()
    [0.5, 0.5]
    """

    def __init__(self, value: float = 0.0):
        self.value = float(value)

    def __call__(self, shape, dtype=None) -> Tensor:
        return full(shape, self.value, dtype or "float32")

    def get_config(self) -> dict:
        return {"value": self.value}


class Identity(Initializer):
    """`gain` times the identity matrix (2-D shapes only).

    >>> Identity(2.0)((2, 3)).numpy().tolist()
    [[2.0, 0.0, 0.0], [0.0, 2.0, 0.0]]
    """

    def __init__(self, gain: float = 1.0):
        self.gain = float(gain)

    def __call__(self, shape, dtype=None) -> Tensor:
        shape = tuple(shape)
        if len(shape) != 2:
            raise ValueError(f"Identity: needs a 2-D shape, got {shape}")
        return eye(shape[0], shape[1], dtype=_float_dtype("Identity", dtype)) * self.gain

    def get_config(self) -> dict:
        return {"gain": self.gain}


class RandomNormal(_Seeded):
    """Samples from N(mean, stddev^2).

    >>> RandomNormal(seed=1)((3,)).shape
    (3,)
    """

    def __init__(self, mean: float = 0.0, stddev: float = 0.05, seed=None):
        super().__init__(seed)
        self.mean, self.stddev = float(mean), float(stddev)

    def __call__(self, shape, dtype=None) -> Tensor:
        dtype = _float_dtype("RandomNormal", dtype)
        return tprandom.normal(shape, self.mean, self.stddev, dtype, generator=self._generator())

    def get_config(self) -> dict:
        return {"mean": self.mean, "stddev": self.stddev, **super().get_config()}


class RandomUniform(_Seeded):
    """Samples from [minval, maxval).

    >>> bool(RandomUniform(0.0, 1.0, seed=1)((100,)).numpy().max() < 1.0)
    True
    """

    def __init__(self, minval: float = -0.05, maxval: float = 0.05, seed=None):
        super().__init__(seed)
        if not minval < maxval:
            raise ValueError(f"RandomUniform: minval {minval} must be below maxval {maxval}")
        self.minval, self.maxval = float(minval), float(maxval)

    def __call__(self, shape, dtype=None) -> Tensor:
        dtype = _float_dtype("RandomUniform", dtype)
        return tprandom.uniform(shape, self.minval, self.maxval, dtype, generator=self._generator())

    def get_config(self) -> dict:
        return {"minval": self.minval, "maxval": self.maxval, **super().get_config()}


class TruncatedNormal(_Seeded):
    """Normal samples redrawn until within two standard deviations of the mean.

    >>> bool(np.abs(TruncatedNormal(stddev=1.0, seed=1)((1000,)).numpy()).max() <= 2.0)
    True
    """

    def __init__(self, mean: float = 0.0, stddev: float = 0.05, seed=None):
        super().__init__(seed)
        self.mean, self.stddev = float(mean), float(stddev)

    def __call__(self, shape, dtype=None) -> Tensor:
        dtype = _float_dtype("TruncatedNormal", dtype)
        return tprandom.truncated_normal(shape, self.mean, self.stddev, dtype, generator=self._generator())

    def get_config(self) -> dict:
        return {"mean": self.mean, "stddev": self.stddev, **super().get_config()}


class VarianceScaling(_Seeded):
    """Samples with variance scale / fan, where fan is fan_in, fan_out or their mean
    (`mode`), from a truncated normal, an untruncated normal or a uniform
    (`distribution`).

    >>> VarianceScaling(2.0, "fan_in", "uniform", seed=0)((4, 4)).shape
    (4, 4)
    """

    MODES = ("fan_in", "fan_out", "fan_avg")
    DISTRIBUTIONS = ("truncated_normal", "untruncated_normal", "uniform")

    def __init__(self, scale: float = 1.0, mode: str = "fan_in", distribution: str = "truncated_normal", seed=None):
        super().__init__(seed)
        owner = type(self).__name__
        if not scale > 0:
            raise ValueError(f"{owner}: scale must be > 0, got {scale!r}")
        if mode not in self.MODES:
            raise ValueError(f"{owner}: mode must be one of {self.MODES}, got {mode!r}")
        distribution = str(distribution).lower()
        distribution = "truncated_normal" if distribution == "normal" else distribution
        if distribution not in self.DISTRIBUTIONS:
            raise ValueError(f"{owner}: distribution must be one of {self.DISTRIBUTIONS}, got {distribution!r}")
        self.scale, self.mode, self.distribution = float(scale), mode, distribution

    def __call__(self, shape, dtype=None) -> Tensor:
        dtype = _float_dtype(type(self).__name__, dtype)
        fan_in, fan_out = compute_fans(shape)
        fan = {"fan_in": fan_in, "fan_out": fan_out, "fan_avg": (fan_in + fan_out) / 2.0}[self.mode]
        variance = self.scale / max(1.0, fan)
        gen = self._generator()
        if self.distribution == "uniform":
            limit = math.sqrt(3.0 * variance)
            return tprandom.uniform(shape, -limit, limit, dtype, generator=gen)
        if self.distribution == "untruncated_normal":
            return tprandom.normal(shape, 0.0, math.sqrt(variance), dtype, generator=gen)
        return tprandom.truncated_normal(shape, 0.0, math.sqrt(variance) / _TRUNCATED_STDDEV, dtype, generator=gen)

    def get_config(self) -> dict:
        return {"scale": self.scale, "mode": self.mode, "distribution": self.distribution, **super().get_config()}


class _FixedScaling(VarianceScaling):
    """A VarianceScaling whose scale, mode and distribution are fixed by the class."""

    SETTINGS: tuple = ()

    def __init__(self, seed=None):
        super().__init__(*self.SETTINGS, seed=seed)

    def get_config(self) -> dict:
        return {"seed": super().get_config()["seed"]}


class GlorotUniform(_FixedScaling):
    """Uniform in +-sqrt(6 / (fan_in + fan_out)) (Glorot and Bengio); the default."""

    SETTINGS = (1.0, "fan_avg", "uniform")


class GlorotNormal(_FixedScaling):
    """Truncated normal with variance 2 / (fan_in + fan_out)."""

    SETTINGS = (1.0, "fan_avg", "truncated_normal")


class HeNormal(_FixedScaling):
    """Truncated normal with variance 2 / fan_in (He et al., for ReLU layers)."""

    SETTINGS = (2.0, "fan_in", "truncated_normal")


class HeUniform(_FixedScaling):
    """Uniform in +-sqrt(6 / fan_in)."""

    SETTINGS = (2.0, "fan_in", "uniform")


class LecunNormal(_FixedScaling):
    """Truncated normal with variance 1 / fan_in (for SELU layers)."""

    SETTINGS = (1.0, "fan_in", "truncated_normal")


class LecunUniform(_FixedScaling):
    """Uniform in +-sqrt(3 / fan_in)."""

    SETTINGS = (1.0, "fan_in", "uniform")


class Orthogonal(_Seeded):
    """A (semi-)orthogonal matrix times `gain`, from the QR decomposition of a
    normal sample; shapes of rank > 2 are flattened to [prod(shape[:-1]), shape[-1]].

    >>> q = Orthogonal(seed=0)((4, 4)).numpy()
    >>> bool(abs(q @ q.T - np.eye(4)).max() < 1e-5)
    True
    """

    def __init__(self, gain: float = 1.0, seed=None):
        super().__init__(seed)
        self.gain = float(gain)

    def __call__(self, shape, dtype=None) -> Tensor:
        dtype = _float_dtype("Orthogonal", dtype)
        shape = tuple(int(d) for d in shape)
        if len(shape) < 2:
            raise ValueError(f"Orthogonal: needs a shape of rank >= 2, got {shape}")
        rows, cols = math.prod(shape[:-1]), shape[-1]
        sample = tprandom.normal((max(rows, cols), min(rows, cols)), dtype="float64", generator=self._generator())
        q, r = np.linalg.qr(sample.numpy())
        q = q * np.where(np.diag(r) < 0, -1.0, 1.0)  # makes the decomposition unique (uniform over matrices)
        if rows < cols:
            q = q.T
        return tensor((self.gain * q).reshape(shape), dtype=dtype)

    def get_config(self) -> dict:
        return {"gain": self.gain, **super().get_config()}


def _window(name: str, length: int, periodic: bool) -> np.ndarray:
    """scipy's window `name` of `length` samples (symmetric unless `periodic`)."""
    # lazily: importing scipy.signal adds a process-wide warnings filter, so only STFT pays for it
    import scipy.signal

    return scipy.signal.get_window(name, length, fftbins=periodic)


class STFT(Initializer):
    """Kernels of the short-time Fourier transform, for a Conv1D of shape
    [frame_length, input_channels, fft_bins]: the real (`side="real"`, cosine) or
    imaginary (`side="imag"`, sine) part of the DFT basis, times `window` (a scipy window
    name or an array; None for none) and divided by its "density" (root of the summed
    squares) or "spectrum" (sum) `scaling`; `periodic` asks for a periodic window.

    >>> STFT(window=None)((4, 1, 3)).numpy()[:, 0, 0].tolist()
    [1.0, 1.0, 1.0, 1.0]
    """

    def __init__(self, side: str = "real", window="hann", scaling="density", periodic: bool = False):
        if side not in ("real", "imag"):
            raise ValueError(f"STFT: side must be 'real' or 'imag', got {side!r}")
        if isinstance(window, str):
            _window(window, 1, False)  # an unknown name raises here
        if scaling is not None and scaling not in ("density", "spectrum"):
            raise ValueError(f"STFT: scaling must be None, 'density' or 'spectrum', got {scaling!r}")
        self.side, self.window, self.scaling, self.periodic = side, window, scaling, bool(periodic)

    def __call__(self, shape, dtype=None) -> Tensor:
        dtype = _float_dtype("STFT", dtype)
        shape = tuple(int(d) for d in shape)
        if len(shape) != 3:
            raise ValueError(f"STFT: needs a shape [frame_length, input_channels, fft_bins], got {shape}")
        frame_length, channels, bins = shape
        time = np.arange(frame_length, dtype=np.float64).reshape(-1, 1, 1)
        frequency = np.arange(bins, dtype=np.float64).reshape(1, 1, -1) / ((bins - 1) * 2)
        angles = -2.0 * time * frequency * np.pi
        kernel = np.cos(angles) if self.side == "real" else np.sin(angles)
        if self.window is not None:
            window = self.window
            if isinstance(window, str):
                window = _window(window, frame_length, self.periodic)
            window = np.asarray(window, dtype=np.float64)
            if window.shape != (frame_length,):
                raise ValueError(f"STFT: window must have shape ({frame_length},), got {window.shape}")
            window = window.reshape(-1, 1, 1)
            scale = 1.0
            if self.scaling == "density":
                scale = np.sqrt(np.sum(np.square(window)))
            elif self.scaling == "spectrum":
                scale = np.sum(np.abs(window))
            kernel = kernel * window / scale
        return tensor(np.broadcast_to(kernel, (frame_length, channels, bins)).copy(), dtype=dtype)

    def get_config(self) -> dict:
        window = self.window.tolist() if isinstance(self.window, np.ndarray) else self.window
        return {"side": self.side, "window": window, "periodic": self.periodic, "scaling": self.scaling}


_CLASSES = (
    Zeros,
    Ones,
    Constant,
    Identity,
    RandomNormal,
    RandomUniform,
    TruncatedNormal,
    VarianceScaling,
    GlorotUniform,
    GlorotNormal,
    HeNormal,
    HeUniform,
    LecunNormal,
    LecunUniform,
    Orthogonal,
    STFT,
)


def _key(name: str) -> str:
    return name.lower().replace("_", "")


_BY_KEY = {_key(cls.__name__): cls for cls in _CLASSES} | {
    "zero": Zeros,
    "one": Ones,
    "normal": RandomNormal,
    "uniform": RandomUniform,
    "identityinitializer": Identity,
    "orthogonalinitializer": Orthogonal,
    "stftinitializer": STFT,
}
_KNOWN = [
    "zeros",
    "ones",
    "constant",
    "identity",
    "random_normal",
    "random_uniform",
    "truncated_normal",
    "variance_scaling",
    "glorot_uniform",
    "glorot_normal",
    "he_normal",
    "he_uniform",
    "lecun_normal",
    "lecun_uniform",
    "orthogonal",
    "stft",
]


def _builtin(name: str):
    return _BY_KEY.get(_key(name))


def get(identifier):
    """An initializer from a name ("glorot_uniform", "he_normal", "zeros"...;
    class names work too), a {"class_name", "config"} dict, an Initializer or
    any callable (returned as is), or None (returned as is).

    >>> get("he_normal")
    HeNormal(seed=None)
    """
    if identifier is None or isinstance(identifier, Initializer):
        return identifier
    if isinstance(identifier, dict):
        return serialization.deserialize(identifier, Initializer, _builtin, "initializers.get")
    if isinstance(identifier, str):
        cls = serialization.lookup(identifier, builtin=_builtin)
        if cls is None:
            raise ValueError(f"initializers.get: unknown initializer {identifier!r}; known names: {_KNOWN}")
        return cls()
    if callable(identifier):
        return identifier
    raise TypeError(
        f"initializers.get: expected an Initializer, a name, a config dict or a callable, got {identifier!r}"
    )


def serialize(initializer) -> dict | str | None:
    """A config for an initializer, as `keras.initializers.serialize`: a {"class_name",
    "config"} dict for an Initializer (plus "registered_name" for a registered class), a name
    stays a name, None stays None; `deserialize` turns it back.

    >>> serialize(HeNormal(seed=3))
    {'class_name': 'HeNormal', 'config': {'seed': 3}}
    """
    if initializer is None or isinstance(initializer, str):
        return initializer
    if isinstance(initializer, Initializer):
        return serialization.serialize(initializer)
    name = serialization.registered_name(initializer)
    if name is None:
        raise ValueError(
            f"initializers.serialize: {initializer!r} is neither an Initializer nor a registered function; "
            "subclass tp.initializers.Initializer or register it with @tp.saving.register_serializable()"
        )
    return name


def deserialize(config) -> Initializer:
    """The initializer a `serialize` config (a dict or a name) describes.

    >>> deserialize({"class_name": "HeNormal", "config": {"seed": 3}})
    HeNormal(seed=3)
    """
    if not isinstance(config, dict | str):
        raise TypeError(f"initializers.deserialize: expected a config dict or a name, got {config!r}")
    return get(config)


# Keras's other names of the classes: the lowercase spellings and the *Initializer aliases.
IdentityInitializer = Identity
OrthogonalInitializer = Orthogonal
STFTInitializer = STFT
constant = Constant
glorot_normal = GlorotNormal
glorot_uniform = GlorotUniform
he_normal = HeNormal
he_uniform = HeUniform
identity = Identity
lecun_normal = LecunNormal
lecun_uniform = LecunUniform
ones = Ones
orthogonal = Orthogonal
random_normal = RandomNormal
random_uniform = RandomUniform
stft = STFT
truncated_normal = TruncatedNormal
variance_scaling = VarianceScaling
zeros = Zeros
