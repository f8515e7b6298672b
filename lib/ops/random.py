"""Random numbers: a global stream (`seed`) and reproducible `Generator`s.

Each sampling function is an op whose attrs carry the generator it draws from. The
functions take Keras 3's `seed=` as well as tapeflow's `generator=`: an int seed draws the
same numbers on every call, a `SeedGenerator` (or `Generator`) moves on with each call, and
None draws from the global stream.

>>> import tapeflow as tp
>>> tp.random.seed(0)
>>> a = tp.random.normal((3,))
>>> tp.random.seed(0)
>>> bool((tp.random.normal((3,)) == a).numpy().all())
True
"""

from __future__ import annotations

import itertools
import math

import numpy as np

from tapeflow import dtypes
from tapeflow.backends.draws import uniform01
from tapeflow.ops import shapes
from tapeflow.ops.array import gather
from tapeflow.ops.core import cast
from tapeflow.ops.dynamic_shape import zeros_of
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


class SeedGenerator(Generator):
    """Keras 3's `keras.random.SeedGenerator`: a stream that each random call with
    `seed=generator` moves on, so repeated calls differ but a rerun from the same seed
    repeats them. Without a seed it takes one from the global stream (which
    `tp.random.seed` and `tp.utils.set_random_seed` seed).

    >>> import tapeflow as tp
    >>> a, b = tp.random.SeedGenerator(42), tp.random.SeedGenerator(42)
    >>> x = tp.random.normal((3,), seed=a)
    >>> bool((x == tp.random.normal((3,), seed=b)).numpy().all())
    True
    >>> bool((x == tp.random.normal((3,), seed=a)).numpy().all())
    False
    >>> a.get_config()["seed"]
    42
    """

    _COUNT = itertools.count()

    def __init__(self, seed: int | None = None, name: str | None = None, **kwargs):
        unknown = set(kwargs) - {"backend"}
        if unknown or kwargs.get("backend") is not None:
            raise TypeError(f"SeedGenerator: unexpected arguments {sorted(kwargs)}")
        if seed is None:
            seed = int(_GLOBAL.numpy.integers(1, 10**9))
        if not isinstance(seed, int | np.integer) or isinstance(seed, bool):
            raise ValueError(f"SeedGenerator: seed must be an int or None, got {seed!r}")
        number = next(SeedGenerator._COUNT)
        self.name = name or ("seed_generator" if number == 0 else f"seed_generator_{number}")
        super().__init__(int(seed))

    def next(self, ordered: bool = True) -> Tensor:
        """A fresh seed drawn from the stream: two values in [0, 2**32), as Keras's `next()` gives."""
        return as_tensor(self.numpy.integers(0, 2**32, size=2, dtype=np.uint32))

    def get_config(self) -> dict:
        return {"seed": self.seed, "name": self.name}

    @classmethod
    def from_config(cls, config: dict) -> SeedGenerator:
        return cls(**config)

    def __repr__(self) -> str:
        return f"<SeedGenerator name={self.name!r} seed={self.seed}>"


_GLOBAL = Generator(None)


def seed(value: int) -> None:
    """Reset the global random stream."""
    _GLOBAL.reset(shapes.as_int("random.seed", "seed", value, high=2**64 - 1))
    _SEEDED.clear()


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
    def infer(*like, shape, dtype, generator, **_):
        if like:  # a draw shaped like a tensor whose sizes are known only at run time
            shape = like[0].shape
            return [(tuple(shape), dtypes.as_dtype(dtype))]
        d = dtypes.as_dtype(dtype)
        if d.kind != "f":
            raise TypeError(f"{name}: dtype must be floating point, got {d}")
        return [(shapes.as_dims(name, shape), d)]

    return infer


@defop("random_normal", infer=_float_shape_infer("random_normal"), stateful=True)
def _NORMAL(*like, shape, dtype, generator, mean, stddev):
    shape = like[0].shape if like else shape
    return (generator.numpy.standard_normal(shape) * stddev + mean).astype(dtypes.as_dtype(dtype).np)


@defop("random_uniform", infer=_float_shape_infer("random_uniform"), stateful=True)
def _UNIFORM(*like, shape, dtype, generator, minval, maxval):
    shape = like[0].shape if like else shape
    np_dtype = dtypes.as_dtype(dtype).np
    if minval == 0.0 and maxval == 1.0 and np_dtype in (np.float32, np.float64):
        return uniform01(generator.numpy, shape, np_dtype)
    if minval == 0.0 and maxval == 1.0:  # the same draws as uniform(0, 1), without its scaling passes
        return generator.numpy.random(shape).astype(np_dtype)
    return generator.numpy.uniform(minval, maxval, shape).astype(np_dtype)


@defop("truncated_normal", infer=_float_shape_infer("truncated_normal"), stateful=True)
def _TRUNCATED(*like, shape, dtype, generator, mean, stddev):
    shape = like[0].shape if like else shape
    draw = generator.numpy.standard_normal(shape)
    bad = np.abs(draw) > 2.0
    while bad.any():
        draw[bad] = generator.numpy.standard_normal(int(bad.sum()))
        bad = np.abs(draw) > 2.0
    return (draw * stddev + mean).astype(dtypes.as_dtype(dtype).np)


def _shape(name, shape) -> tuple:
    return shapes.as_dims(name, shape)


def _source(name: str, generator, seed):
    """The one of `generator=` (tapeflow's name) and `seed=` (Keras's) that was given."""
    if generator is not None and seed is not None:
        raise ValueError(f"{name}: pass either seed= or generator=, not both (got {seed!r} and {generator!r})")
    return generator if seed is None else seed


def _sample(opdef, shape, dtype, generator, **params) -> Tensor:
    """A draw of `shape`; sizes known only at run time (`DynamicDim`s) are read from a zero
    tensor of that shape, the op's one input."""
    dtype = dtypes.as_dtype("float32" if dtype is None else dtype).name
    dynamic = shapes.has_dynamic(shape)
    attrs = {
        "shape": None if dynamic else _shape(opdef.name, shape),
        "dtype": dtype,
        "generator": _generator(generator),
        **params,
    }
    return apply(opdef, (zeros_of(opdef.name, shape, dtype),) if dynamic else (), attrs)


def normal(shape, mean=0.0, stddev=1.0, dtype="float32", generator=None, *, seed=None) -> Tensor:
    """Samples from a normal distribution.

    >>> import tapeflow as tp
    >>> tp.random.normal((2, 3), generator=tp.random.Generator(0)).shape
    (2, 3)
    >>> bool((tp.random.normal((2,), seed=1) == tp.random.normal((2,), seed=1)).numpy().all())
    True
    """
    source = _source("random_normal", generator, seed)
    return _sample(_NORMAL, shape, dtype, source, mean=float(mean), stddev=float(stddev))


def uniform(shape, minval=0.0, maxval=1.0, dtype="float32", generator=None, *, seed=None) -> Tensor:
    """Samples from [minval, maxval).

    >>> import tapeflow as tp
    >>> float(tp.max(tp.random.uniform((100,), 2, 3))) < 3
    True
    """
    if maxval <= minval:
        raise ValueError(f"random_uniform: maxval {maxval} must exceed minval {minval}")
    source = _source("random_uniform", generator, seed)
    return _sample(_UNIFORM, shape, dtype, source, minval=float(minval), maxval=float(maxval))


def truncated_normal(shape, mean=0.0, stddev=1.0, dtype="float32", generator=None, *, seed=None) -> Tensor:
    """Normal samples redrawn until within two standard deviations of the mean.

    >>> import tapeflow as tp
    >>> float(tp.max(tp.abs(tp.random.truncated_normal((1000,))))) <= 2
    True
    """
    source = _source("truncated_normal", generator, seed)
    return _sample(_TRUNCATED, shape, dtype, source, mean=float(mean), stddev=float(stddev))


def dropout(inputs, rate: float, noise_shape=None, seed=None) -> Tensor:
    """Keras 3's `keras.random.dropout`: zero each element with probability `rate` and
    scale the others by 1 / (1 - rate). `noise_shape` (None entries take the input's size)
    shares one draw along its size-1 axes; `seed` is an int, a SeedGenerator (or
    Generator), or None for the global stream.

    >>> import tapeflow as tp
    >>> y = tp.random.dropout(tp.ones((1000,)), 0.5, seed=0)
    >>> sorted(set(y.numpy().tolist())), 400 < int(tp.sum(tp.cast(y > 0, "int32"))) < 600
    ([0.0, 2.0], True)
    """
    x = as_tensor(inputs, name="dropout")
    if not 0.0 <= float(rate) < 1.0:
        raise ValueError(f"dropout: rate must be in [0, 1), got {rate}")
    if rate == 0.0:
        return x
    shape = x.shape if noise_shape is None else tuple(noise_shape)
    if len(shape) != len(x.shape):
        raise ValueError(f"dropout: noise_shape {noise_shape} must have the rank of the input's shape {x.shape}")
    shape = tuple(size if want is None else want for size, want in zip(x.shape, shape, strict=True))
    keep = uniform(shape, dtype=x.dtype, seed=seed) >= rate
    return x * cast(keep, x.dtype) * (1.0 / (1.0 - rate))


def _categorical_infer(logits, num_samples, generator):
    if len(logits.shape) != 2 or logits.dtype.kind != "f":
        raise ValueError(
            f"categorical: logits must be a float [batch, classes] tensor, got {logits.shape} {logits.dtype}"
        )
    return [((logits.shape[0], shapes.as_int("categorical", "num_samples", num_samples)), dtypes.int64)]


@defop("categorical", infer=_categorical_infer, stateful=True)
def _CATEGORICAL(logits, num_samples, generator):
    z = logits.astype(np.float64)
    p = np.exp(z - z.max(axis=1, keepdims=True))
    cdf = np.cumsum(p / p.sum(axis=1, keepdims=True), axis=1)
    u = np.asarray(generator.numpy.random((logits.shape[0], num_samples)), like=z)  # drawn here, used where z lives
    out = np.empty((logits.shape[0], num_samples), dtype=np.int64, like=z)
    for row in range(logits.shape[0]):
        out[row] = np.minimum(np.searchsorted(cdf[row], u[row], side="right"), logits.shape[1] - 1)
    return out


def categorical(logits, num_samples: int, generator=None, *, dtype="int64", seed=None) -> Tensor:
    """Class indices drawn from softmax(logits), one row of samples per batch row
    (int64, as TensorFlow gives them; Keras's default is `dtype="int32"`).

    >>> import tapeflow as tp
    >>> tp.random.categorical(tp.tensor([[0.0, 50.0]]), 3).numpy().tolist()
    [[1, 1, 1]]
    >>> tp.random.categorical(tp.tensor([[0.0, 50.0]]), 1, dtype="int32", seed=3).dtype
    tapeflow.int32
    """
    logits = as_tensor(logits, name="categorical")
    out_dtype = dtypes.as_dtype(dtype)
    if out_dtype.kind not in "iu":
        raise TypeError(f"categorical: dtype must be an integer dtype, got {out_dtype}")
    drawn = apply(
        _CATEGORICAL,
        (logits,),
        {
            "num_samples": shapes.as_int("categorical", "num_samples", num_samples),
            "generator": _generator(_source("categorical", generator, seed)),
        },
    )
    return drawn if out_dtype == dtypes.int64 else cast(drawn, out_dtype)


def _permutation_infer(n, generator):
    return [((shapes.as_int("random_permutation", "n", n),), dtypes.int64)]


@defop("random_permutation", infer=_permutation_infer, stateful=True)
def _PERMUTATION(n, generator):
    return generator.numpy.permutation(n)


def shuffle(x, generator=None, *, axis: int = 0, seed=None) -> Tensor:
    """`x` with its `axis` (the first by default) randomly permuted (differentiable in `x`).

    >>> import tapeflow as tp
    >>> sorted(tp.random.shuffle(tp.arange(5)).numpy().tolist())
    [0, 1, 2, 3, 4]
    >>> sorted(tp.random.shuffle(tp.reshape(tp.arange(6), (2, 3)), axis=1, seed=0).numpy()[0].tolist())
    [0, 1, 2]
    """
    x = as_tensor(x, name="shuffle")
    if x.ndim == 0:
        raise ValueError("shuffle: needs a tensor of rank >= 1")
    axis = shapes.as_int("shuffle", "axis", axis, low=-x.ndim, high=x.ndim - 1) % x.ndim
    perm = apply(_PERMUTATION, (), {"n": x.shape[axis], "generator": _generator(_source("shuffle", generator, seed))})
    return gather(x, perm, axis=axis)


# ------------------------------------------------- gamma, beta, binomial, integers
def _scalar(name: str, label: str, value) -> float:
    """A distribution parameter as a float: a number or a one-element tensor or array."""
    if isinstance(value, Tensor):
        value = value.numpy()
    array = np.asarray(value)
    if array.size != 1 or array.dtype.kind not in "biuf":
        raise NotImplementedError(
            f"{name}: {label} must be a single number (per-element parameters are not supported), got {value!r}"
        )
    if array.dtype.kind == "b":
        raise TypeError(f"{name}: {label} must be a number, got {value!r}")
    return float(array.reshape(()))


def _draw_infer(name: str, kind: str):
    def infer(*like, shape, dtype, generator, **_):
        d = dtypes.as_dtype(dtype)
        if d.kind not in kind:
            wanted = "floating point" if kind == "f" else "integer"
            raise TypeError(f"{name}: dtype must be {wanted}, got {d}")
        if like:
            return [(tuple(like[0].shape), d)]
        return [(shapes.as_dims(name, shape), d)]

    return infer


@defop("random_gamma", infer=_draw_infer("random_gamma", "f"), stateful=True)
def _GAMMA(*like, shape, dtype, generator, alpha):
    shape = like[0].shape if like else shape
    return generator.numpy.standard_gamma(alpha, shape).astype(dtypes.as_dtype(dtype).np)


@defop("random_beta", infer=_draw_infer("random_beta", "f"), stateful=True)
def _BETA(*like, shape, dtype, generator, alpha, beta):
    shape = like[0].shape if like else shape
    return generator.numpy.beta(alpha, beta, shape).astype(dtypes.as_dtype(dtype).np)


@defop("random_binomial", infer=_draw_infer("random_binomial", "fiu"), stateful=True)
def _BINOMIAL(*like, shape, dtype, generator, counts, probabilities):
    shape = like[0].shape if like else shape
    return generator.numpy.binomial(counts, probabilities, shape).astype(dtypes.as_dtype(dtype).np)


@defop("random_integers", infer=_draw_infer("random_integers", "iu"), stateful=True)
def _INTEGERS(*like, shape, dtype, generator, minval, maxval):
    shape = like[0].shape if like else shape
    return generator.numpy.integers(minval, maxval, shape).astype(dtypes.as_dtype(dtype).np)


def _draw_from(opdef, shape, dtype, seed, **params) -> Tensor:
    """A draw of `shape` from `opdef` (sizes known only at run time read from a zero tensor)."""
    dynamic = shapes.has_dynamic(shape)
    attrs = {
        "shape": None if dynamic else _shape(opdef.name, shape),
        "dtype": dtypes.as_dtype(dtype).name,
        "generator": _generator(seed),
        **params,
    }
    return apply(opdef, (zeros_of(opdef.name, shape, "float32"),) if dynamic else (), attrs)


def gamma(shape, alpha, dtype=None, seed=None) -> Tensor:
    """Keras 3's `keras.random.gamma`: samples of the gamma distribution with shape
    (concentration) `alpha` and scale 1; `seed` is an int (the same draw every call), a
    SeedGenerator (moves on each call) or None (the global stream).

    >>> import tapeflow as tp
    >>> x = tp.random.gamma((20000,), alpha=3.0, seed=1)
    >>> round(float(tp.mean(x)), 1), bool((x == tp.random.gamma((20000,), 3.0, seed=1)).numpy().all())
    (3.0, True)
    """
    alpha = _scalar("gamma", "alpha", alpha)
    if not alpha > 0:
        raise ValueError(f"gamma: alpha must be > 0, got {alpha}")
    return _draw_from(_GAMMA, shape, dtype or "float32", seed, alpha=alpha)


def beta(shape, alpha, beta, dtype=None, seed=None) -> Tensor:  # noqa: A002 - Keras's argument name
    """Keras 3's `keras.random.beta`: samples in [0, 1] of the beta distribution with
    concentrations `alpha` and `beta`; `seed` as in `gamma`.

    >>> import tapeflow as tp
    >>> x = tp.random.beta((20000,), alpha=2.0, beta=6.0, seed=2)
    >>> round(float(tp.mean(x)), 2)
    0.25
    """
    a, b = _scalar("beta", "alpha", alpha), _scalar("beta", "beta", beta)
    if not (a > 0 and b > 0):
        raise ValueError(f"beta: alpha and beta must be > 0, got {a} and {b}")
    return _draw_from(_BETA, shape, dtype or "float32", seed, alpha=a, beta=b)


def binomial(shape, counts, probabilities, dtype=None, seed=None) -> Tensor:
    """Keras 3's `keras.random.binomial`: the number of successes in `counts` trials of
    probability `probabilities`, as floats (float32 by default, as Keras); `seed` as in
    `gamma`.

    >>> import tapeflow as tp
    >>> x = tp.random.binomial((20000,), counts=10, probabilities=0.3, seed=3)
    >>> round(float(tp.mean(x)), 1), x.dtype
    (3.0, tapeflow.float32)
    """
    n = _scalar("binomial", "counts", counts)
    p = _scalar("binomial", "probabilities", probabilities)
    if n < 0 or n != math.floor(n):
        raise ValueError(f"binomial: counts must be a whole number >= 0, got {counts!r}")
    if not 0.0 <= p <= 1.0:
        raise ValueError(f"binomial: probabilities must lie in [0, 1], got {probabilities!r}")
    return _draw_from(_BINOMIAL, shape, dtype or "float32", seed, counts=int(n), probabilities=p)


def randint(shape, minval, maxval, dtype="int32", seed=None) -> Tensor:
    """Keras 3's `keras.random.randint`: integers drawn uniformly from [minval, maxval);
    `seed` as in `gamma`.

    >>> import tapeflow as tp
    >>> x = tp.random.randint((1000,), 2, 5, seed=4)
    >>> sorted(set(x.numpy().tolist())), x.dtype
    ([2, 3, 4], tapeflow.int32)
    """
    low = shapes.as_int("randint", "minval", minval, low=-(2**63), high=2**63 - 1)
    high = shapes.as_int("randint", "maxval", maxval, low=-(2**63), high=2**63 - 1)
    if high <= low:
        raise ValueError(f"randint: maxval {maxval} must exceed minval {minval}")
    return _draw_from(_INTEGERS, shape, dtype, seed, minval=low, maxval=high)


# ------------------------------------------------------------ candidate sampling
_SEEDED: dict[int, Generator] = {}  # op seed -> its stream, so repeated calls draw anew


def _op_generator(seed) -> Generator:
    """The stream an op with `seed` draws from: the global one for None, one stream per
    int seed (continued by every call with that seed, restarted by `tp.random.seed`)."""
    if seed is None or isinstance(seed, Generator):
        return _generator(seed)
    if not isinstance(seed, int | np.integer) or isinstance(seed, bool):
        raise TypeError(f"candidate sampler: seed must be an int, a tp.random.Generator or None, got {seed!r}")
    key = int(seed)
    if key not in _SEEDED:
        base = _GLOBAL.seed if _GLOBAL.seed is not None else 0
        _SEEDED[key] = Generator(int(np.random.SeedSequence([base, key]).generate_state(1)[0]))
    return _SEEDED[key]


def class_probabilities(distribution: str, range_max: int, unigrams=(), distortion: float = 1.0) -> np.ndarray:
    """P(class) for classes 0..range_max-1 (float64): "uniform"; "log_uniform", Zipf's
    (log(k + 2) - log(k + 1)) / log(range_max + 1); "unigram", unigrams ** distortion
    normalized.

    >>> class_probabilities("log_uniform", 3).round(3).tolist()
    [0.5, 0.292, 0.208]
    """
    if distribution == "uniform":
        return np.full(range_max, 1.0 / range_max)
    if distribution == "log_uniform":
        k = np.arange(range_max, dtype=np.float64)
        return (np.log(k + 2.0) - np.log(k + 1.0)) / np.log(range_max + 1.0)
    weights = np.asarray(unigrams, dtype=np.float64) ** distortion
    return weights / weights.sum()


def _sampler_infer(
    true_classes, num_true, num_sampled, unique, range_max, distribution, unigrams, distortion, generator
):
    name = f"{distribution}_candidate_sampler"
    if true_classes.dtype.kind != "i" or len(true_classes.shape) != 2 or true_classes.shape[1] != num_true:
        raise ValueError(
            f"{name}: true_classes must be an integer [batch, num_true={num_true}] tensor, "
            f"got shape {true_classes.shape} and dtype {true_classes.dtype}"
        )
    if range_max < 1 or num_sampled < 1:
        raise ValueError(f"{name}: range_max ({range_max}) and num_sampled ({num_sampled}) must be >= 1")
    if unique and num_sampled > range_max:
        raise ValueError(f"{name}: cannot draw {num_sampled} distinct classes out of range_max={range_max}")
    return [((num_sampled,), dtypes.int64), (true_classes.shape, dtypes.float32), ((num_sampled,), dtypes.float32)]


def _draw(distribution, p, n, rng) -> np.ndarray:
    if distribution == "uniform":
        return rng.integers(0, p.shape[0], n)
    if distribution == "log_uniform":
        k = np.floor(np.exp(rng.random(n) * np.log(p.shape[0] + 1.0))) - 1.0
        return np.clip(k, 0, p.shape[0] - 1).astype(np.int64)
    cdf = np.cumsum(p)
    return np.minimum(np.searchsorted(cdf, rng.random(n) * cdf[-1], side="right"), p.shape[0] - 1)


@defop("candidate_sampler", infer=_sampler_infer, num_outputs=3, stateful=True)
def _CANDIDATE_SAMPLER(
    true_classes, num_true, num_sampled, unique, range_max, distribution, unigrams, distortion, generator
):
    """(sampled classes, expected count of each true class, expected count of each sampled
    class), counts as TensorFlow reckons them: p * num_sampled, or, for unique draws,
    1 - (1 - p) ** tries with tries the draws it took to find num_sampled distinct classes."""
    p = class_probabilities(distribution, range_max, unigrams, distortion)
    rng = generator.numpy
    if not unique:
        sampled = _draw(distribution, p, num_sampled, rng)
        expected = lambda q: q * num_sampled  # noqa: E731
    else:
        if np.count_nonzero(p) < num_sampled:
            raise ValueError(f"{distribution}_candidate_sampler: fewer than {num_sampled} classes have p > 0")
        draws = np.zeros(0, dtype=np.int64)
        while True:
            draws = np.concatenate([draws, _draw(distribution, p, max(2 * num_sampled, 64), rng)])
            _, first = np.unique(draws, return_index=True)
            if first.shape[0] >= num_sampled:
                first = np.sort(first)[:num_sampled]
                break
        sampled, tries = draws[first], first[-1] + 1
        expected = lambda q: -np.expm1(tries * np.log1p(-q))  # noqa: E731
    in_range = np.clip(true_classes, 0, range_max - 1)
    return sampled.astype(np.int64), expected(p[in_range]).astype(np.float32), expected(p[sampled]).astype(np.float32)


def _candidates(
    distribution, true_classes, num_true, num_sampled, unique, range_max, seed, unigrams=(), distortion=1.0
):
    true_classes = as_tensor(true_classes, name=f"{distribution}_candidate_sampler")
    attrs = {
        "num_true": int(num_true),
        "num_sampled": int(num_sampled),
        "unique": bool(unique),
        "range_max": int(range_max),
        "distribution": distribution,
        "unigrams": tuple(float(u) for u in unigrams),
        "distortion": float(distortion),
        "generator": _op_generator(seed),
    }
    return apply(_CANDIDATE_SAMPLER, (true_classes,), attrs)


def uniform_candidate_sampler(true_classes, num_true: int, num_sampled: int, unique: bool, range_max: int, seed=None):
    """Sample `num_sampled` classes uniformly from [0, range_max), as TensorFlow's sampler
    does: returns (sampled_candidates, true_expected_count, sampled_expected_count).

    >>> import tapeflow as tp
    >>> s, t, e = tp.random.uniform_candidate_sampler([[1]], 1, 4, True, 10, seed=0)
    >>> s.shape, t.shape, e.shape
    ((4,), (1, 1), (4,))
    """
    return _candidates("uniform", true_classes, num_true, num_sampled, unique, range_max, seed)


def log_uniform_candidate_sampler(
    true_classes, num_true: int, num_sampled: int, unique: bool, range_max: int, seed=None
):
    """Sample classes from the Zipfian distribution P(k) = log((k + 2) / (k + 1)) / log(range_max + 1),
    which suits classes numbered by decreasing frequency (a word2vec vocabulary).

    >>> import tapeflow as tp
    >>> s, _, _ = tp.random.log_uniform_candidate_sampler([[0]], 1, 5, True, 100, seed=1)
    >>> len(set(s.numpy().tolist()))
    5
    """
    return _candidates("log_uniform", true_classes, num_true, num_sampled, unique, range_max, seed)


def fixed_unigram_candidate_sampler(
    true_classes,
    num_true: int,
    num_sampled: int,
    unique: bool,
    range_max: int,
    vocab_file: str = "",
    distortion: float = 1.0,
    num_reserved_ids: int = 0,
    num_shards: int = 1,
    shard: int = 0,
    unigrams=(),
    seed=None,
):
    """Sample classes with probability proportional to `unigrams` ** `distortion` (word2vec's
    negative sampling uses counts ** 0.75); the first `num_reserved_ids` classes get none.

    >>> import tapeflow as tp
    >>> s, _, _ = tp.random.fixed_unigram_candidate_sampler([[0]], 1, 3, False, 3, unigrams=[0, 0, 5], seed=2)
    >>> s.numpy().tolist()
    [2, 2, 2]
    """
    name = "fixed_unigram_candidate_sampler"
    if vocab_file or num_shards != 1 or shard != 0:
        raise ValueError(f"{name}: vocab_file and sharding are not supported; pass unigrams=")
    counts = [0.0] * int(num_reserved_ids) + [float(u) for u in unigrams]
    if len(counts) != range_max:
        raise ValueError(
            f"{name}: num_reserved_ids ({num_reserved_ids}) + len(unigrams) ({len(unigrams)}) must equal "
            f"range_max ({range_max})"
        )
    if min(counts) < 0 or sum(counts) <= 0:
        raise ValueError(f"{name}: unigrams must be >= 0 and not all zero")
    return _candidates("unigram", true_classes, num_true, num_sampled, unique, range_max, seed, counts, distortion)
