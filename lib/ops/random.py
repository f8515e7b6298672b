"""Random numbers: a global stream (`seed`) and reproducible `Generator`s.

Each sampling function is an op whose attrs carry the generator it draws from.

>>> import tapeflow as tp
>>> tp.random.seed(0)
>>> a = tp.random.normal((3,))
>>> tp.random.seed(0)
>>> bool((tp.random.normal((3,)) == a).numpy().all())
True
"""

from __future__ import annotations

import numpy as np

from tapeflow import dtypes
from tapeflow.ops import shapes
from tapeflow.ops.array import gather
from tapeflow.ops.registry import apply, as_tensor, defop
from tapeflow.tensor import Tensor


class Generator:
    """A reproducible random stream (PCG64 from a seed).

    >>> import tapeflow as tp
    >>> g1, g2 = tp.random.Generator(7), tp.random.Generator(7)
    >>> bool((g1.uniform((4,)) == g2.uniform((4,))).numpy().all())
    True
    """

    def __init__(self, seed: int | None = None):
        self.reset(seed)

    def reset(self, seed: int | None) -> None:
        self.seed = seed
        self.numpy = np.random.Generator(np.random.PCG64(seed))

    def get_state(self) -> dict:
        """The stream's state (to save in a checkpoint)."""
        return self.numpy.bit_generator.state

    def set_state(self, state: dict) -> None:
        self.numpy.bit_generator.state = state

    def normal(self, shape, mean=0.0, stddev=1.0, dtype="float32") -> Tensor:
        return normal(shape, mean, stddev, dtype, generator=self)

    def uniform(self, shape, minval=0.0, maxval=1.0, dtype="float32") -> Tensor:
        return uniform(shape, minval, maxval, dtype, generator=self)

    def truncated_normal(self, shape, mean=0.0, stddev=1.0, dtype="float32") -> Tensor:
        return truncated_normal(shape, mean, stddev, dtype, generator=self)


_GLOBAL = Generator(None)


def seed(value: int) -> None:
    """Reset the global random stream."""
    _GLOBAL.reset(shapes.as_int("random.seed", "seed", value, high=2**64 - 1))


def global_generator() -> Generator:
    return _GLOBAL


def _generator(g) -> Generator:
    if g is None:
        return _GLOBAL
    if isinstance(g, Generator):
        return g
    if isinstance(g, int | np.integer) and not isinstance(g, bool):
        return Generator(shapes.as_int("random", "generator seed", g, high=2**64 - 1))
    raise TypeError(f"random: generator must be a tp.random.Generator, an int seed or None, got {g!r}")


def _float_shape_infer(name):
    def infer(shape, dtype, generator, **_):
        d = dtypes.as_dtype(dtype)
        if d.kind != "f":
            raise TypeError(f"{name}: dtype must be floating point, got {d}")
        if any(s < 0 for s in shape):
            raise ValueError(f"{name}: negative dimension in shape {shape}")
        return [(tuple(shape), d)]

    return infer


@defop("random_normal", infer=_float_shape_infer("random_normal"), stateful=True)
def _NORMAL(shape, dtype, generator, mean, stddev):
    return (generator.numpy.standard_normal(shape) * stddev + mean).astype(dtypes.as_dtype(dtype).np)


@defop("random_uniform", infer=_float_shape_infer("random_uniform"), stateful=True)
def _UNIFORM(shape, dtype, generator, minval, maxval):
    return generator.numpy.uniform(minval, maxval, shape).astype(dtypes.as_dtype(dtype).np)


@defop("truncated_normal", infer=_float_shape_infer("truncated_normal"), stateful=True)
def _TRUNCATED(shape, dtype, generator, mean, stddev):
    draw = generator.numpy.standard_normal(shape)
    bad = np.abs(draw) > 2.0
    while bad.any():
        draw[bad] = generator.numpy.standard_normal(int(bad.sum()))
        bad = np.abs(draw) > 2.0
    return (draw * stddev + mean).astype(dtypes.as_dtype(dtype).np)


def _shape(name, shape) -> tuple:
    return shapes.as_dims(name, shape)


def _sample(opdef, shape, dtype, generator, **params) -> Tensor:
    attrs = {
        "shape": _shape(opdef.name, shape),
        "dtype": dtypes.as_dtype(dtype).name,
        "generator": _generator(generator),
        **params,
    }
    return apply(opdef, (), attrs)


def normal(shape, mean=0.0, stddev=1.0, dtype="float32", generator=None) -> Tensor:
    """Samples from a normal distribution.

    >>> import tapeflow as tp
    >>> tp.random.normal((2, 3), generator=tp.random.Generator(0)).shape
    (2, 3)
    """
    return _sample(_NORMAL, shape, dtype, generator, mean=float(mean), stddev=float(stddev))


def uniform(shape, minval=0.0, maxval=1.0, dtype="float32", generator=None) -> Tensor:
    """Samples from [minval, maxval).

    >>> import tapeflow as tp
    >>> float(tp.max(tp.random.uniform((100,), 2, 3))) < 3
    True
    """
    if maxval <= minval:
        raise ValueError(f"random_uniform: maxval {maxval} must exceed minval {minval}")
    return _sample(_UNIFORM, shape, dtype, generator, minval=float(minval), maxval=float(maxval))


def truncated_normal(shape, mean=0.0, stddev=1.0, dtype="float32", generator=None) -> Tensor:
    """Normal samples redrawn until within two standard deviations of the mean.

    >>> import tapeflow as tp
    >>> float(tp.max(tp.abs(tp.random.truncated_normal((1000,))))) <= 2
    True
    """
    return _sample(_TRUNCATED, shape, dtype, generator, mean=float(mean), stddev=float(stddev))


def _categorical_infer(logits, num_samples, generator):
    if len(logits.shape) != 2 or logits.dtype.kind != "f":
        raise ValueError(
            f"categorical: logits must be a float [batch, classes] tensor, got {logits.shape} {logits.dtype}"
        )
    return [((logits.shape[0], num_samples), dtypes.int64)]


@defop("categorical", infer=_categorical_infer, stateful=True)
def _CATEGORICAL(logits, num_samples, generator):
    z = logits.astype(np.float64)
    p = np.exp(z - z.max(axis=1, keepdims=True))
    cdf = np.cumsum(p / p.sum(axis=1, keepdims=True), axis=1)
    u = generator.numpy.random((logits.shape[0], num_samples))
    out = np.empty((logits.shape[0], num_samples), dtype=np.int64)
    for row in range(logits.shape[0]):
        out[row] = np.minimum(np.searchsorted(cdf[row], u[row], side="right"), logits.shape[1] - 1)
    return out


def categorical(logits, num_samples: int, generator=None) -> Tensor:
    """Class indices drawn from softmax(logits), one row of samples per batch row.

    >>> import tapeflow as tp
    >>> tp.random.categorical(tp.tensor([[0.0, 50.0]]), 3).numpy().tolist()
    [[1, 1, 1]]
    """
    logits = as_tensor(logits, name="categorical")
    return apply(
        _CATEGORICAL,
        (logits,),
        {"num_samples": shapes.as_int("categorical", "num_samples", num_samples), "generator": _generator(generator)},
    )


def _permutation_infer(n, generator):
    return [((n,), dtypes.int64)]


@defop("random_permutation", infer=_permutation_infer, stateful=True)
def _PERMUTATION(n, generator):
    return generator.numpy.permutation(n)


def shuffle(x, generator=None) -> Tensor:
    """`x` with its first axis randomly permuted (differentiable in `x`).

    >>> import tapeflow as tp
    >>> sorted(tp.random.shuffle(tp.arange(5)).numpy().tolist())
    [0, 1, 2, 3, 4]
    """
    x = as_tensor(x, name="shuffle")
    if x.ndim == 0:
        raise ValueError("shuffle: needs a tensor of rank >= 1")
    perm = apply(_PERMUTATION, (), {"n": x.shape[0], "generator": _generator(generator)})
    return gather(x, perm, axis=0)
