"""Learning-rate schedules: the learning rate as a function of the optimizer step.

An optimizer given a schedule calls it with its `iterations` (0 on the first
update) and uses the result for that update, as Keras does.

>>> import tapeflow as tp
>>> lr = tp.optimizers.schedules.ExponentialDecay(0.1, decay_steps=10, decay_rate=0.5)
>>> lr(0), lr(10), lr(20)
(0.1, 0.05, 0.025)
"""

from __future__ import annotations

import bisect
import math
import numbers

from tapeflow import serialization


class LearningRateSchedule:
    """Base class: `__call__(step) -> float` and `get_config()`.

    >>> class Halving(LearningRateSchedule):
    ...     def __call__(self, step):
    ...         return 1.0 / 2**step
    ...     def get_config(self):
    ...         return {}
    >>> Halving()(3)
    0.125
    """

    def __call__(self, step) -> float:
        raise NotImplementedError(f"{type(self).__name__} must implement __call__(step)")

    def get_config(self) -> dict:
        raise NotImplementedError(f"{type(self).__name__} must implement get_config() to be serializable")

    @classmethod
    def from_config(cls, config: dict) -> LearningRateSchedule:
        return cls(**config)

    def __repr__(self) -> str:
        args = ", ".join(f"{k}={v!r}" for k, v in self.get_config().items())
        return f"{type(self).__name__}({args})"


def _positive_steps(owner: str, label: str, value) -> int:
    if isinstance(value, bool) or not isinstance(value, int | float) or not 0 < value < math.inf:
        raise ValueError(f"{owner}: {label} must be a finite number > 0, got {value!r}")
    return value


def _finite(owner: str, label: str, value) -> float:
    """`value` as a float, or a ValueError for NaN, an infinity or a non-number."""
    if isinstance(value, bool) or not isinstance(value, numbers.Real) or not math.isfinite(value):
        raise ValueError(f"{owner}: {label} must be a finite number, got {value!r}")
    return float(value)


class ExponentialDecay(LearningRateSchedule):
    """initial_learning_rate * decay_rate ** (step / decay_steps); with
    `staircase` the exponent is floored, so the rate drops in steps.

    >>> s = ExponentialDecay(1.0, decay_steps=4, decay_rate=0.5, staircase=True)
    >>> [s(k) for k in (0, 3, 4, 9)]
    [1.0, 1.0, 0.5, 0.25]
    """

    def __init__(
        self,
        initial_learning_rate: float,
        decay_steps: int,
        decay_rate: float,
        staircase: bool = False,
        name: str = "ExponentialDecay",
    ):
        self.initial_learning_rate = _finite("ExponentialDecay", "initial_learning_rate", initial_learning_rate)
        self.decay_steps = _positive_steps("ExponentialDecay", "decay_steps", decay_steps)
        self.decay_rate = _finite("ExponentialDecay", "decay_rate", decay_rate)
        self.staircase = bool(staircase)
        self.name = name

    def __call__(self, step) -> float:
        p = float(step) / self.decay_steps
        if self.staircase:
            p = math.floor(p)
        return self.initial_learning_rate * self.decay_rate**p

    def get_config(self) -> dict:
        return {
            "initial_learning_rate": self.initial_learning_rate,
            "decay_steps": self.decay_steps,
            "decay_rate": self.decay_rate,
            "staircase": self.staircase,
            "name": self.name,
        }


class CosineDecay(LearningRateSchedule):
    """Cosine decay from the initial rate to alpha * initial over decay_steps,
    then constant; with `warmup_target`, a linear warmup to it over
    `warmup_steps` comes first and the decay starts from the target.

    >>> s = CosineDecay(1.0, decay_steps=10, alpha=0.1)
    >>> [round(s(k), 4) for k in (0, 5, 10, 50)]
    [1.0, 0.55, 0.1, 0.1]
    >>> w = CosineDecay(0.0, decay_steps=10, warmup_target=1.0, warmup_steps=4)
    >>> [round(w(k), 4) for k in (0, 2, 4, 9, 14)]
    [0.0, 0.5, 1.0, 0.5, 0.0]
    """

    def __init__(
        self,
        initial_learning_rate: float,
        decay_steps: int,
        alpha: float = 0.0,
        name: str = "CosineDecay",
        warmup_target: float | None = None,
        warmup_steps: int = 0,
    ):
        self.initial_learning_rate = _finite("CosineDecay", "initial_learning_rate", initial_learning_rate)
        self.decay_steps = _positive_steps("CosineDecay", "decay_steps", decay_steps)
        self.alpha = _finite("CosineDecay", "alpha", alpha)
        self.name = name
        self.warmup_target = None if warmup_target is None else _finite("CosineDecay", "warmup_target", warmup_target)
        if warmup_steps < 0:
            raise ValueError(f"CosineDecay: warmup_steps must be >= 0, got {warmup_steps!r}")
        self.warmup_steps = warmup_steps

    def _decay(self, step: float, start: float) -> float:
        fraction = min(step, self.decay_steps) / self.decay_steps
        cosine = 0.5 * (1.0 + math.cos(math.pi * fraction))
        return start * ((1.0 - self.alpha) * cosine + self.alpha)

    def __call__(self, step) -> float:
        step = float(step)
        if self.warmup_target is None:
            return self._decay(step, self.initial_learning_rate)
        if step < self.warmup_steps:
            fraction = step / self.warmup_steps
            return self.initial_learning_rate + (self.warmup_target - self.initial_learning_rate) * fraction
        return self._decay(step - self.warmup_steps, self.warmup_target)

    def get_config(self) -> dict:
        return {
            "initial_learning_rate": self.initial_learning_rate,
            "decay_steps": self.decay_steps,
            "alpha": self.alpha,
            "name": self.name,
            "warmup_target": self.warmup_target,
            "warmup_steps": self.warmup_steps,
        }


class PiecewiseConstantDecay(LearningRateSchedule):
    """values[0] while step <= boundaries[0], values[i] while
    boundaries[i-1] < step <= boundaries[i], values[-1] after the last boundary.

    >>> s = PiecewiseConstantDecay([10, 20], [1.0, 0.5, 0.1])
    >>> [s(k) for k in (0, 10, 11, 20, 21)]
    [1.0, 1.0, 0.5, 0.5, 0.1]
    """

    def __init__(self, boundaries, values, name: str = "PiecewiseConstant"):
        boundaries, values = list(boundaries), list(values)
        if len(boundaries) != len(values) - 1:
            raise ValueError(
                f"PiecewiseConstantDecay: needs one more value than boundaries, got {len(boundaries)} "
                f"boundaries {boundaries} and {len(values)} values {values}"
            )
        if any(not lo < hi for lo, hi in zip(boundaries, boundaries[1:], strict=False)):
            raise ValueError(f"PiecewiseConstantDecay: boundaries must increase strictly, got {boundaries}")
        for v in boundaries:
            _finite("PiecewiseConstantDecay", "each boundary", v)
        self.boundaries = boundaries
        self.values = [_finite("PiecewiseConstantDecay", "each value", v) for v in values]
        self.name = name

    def __call__(self, step) -> float:
        return self.values[bisect.bisect_left(self.boundaries, float(step))]

    def get_config(self) -> dict:
        return {"boundaries": list(self.boundaries), "values": list(self.values), "name": self.name}


class PolynomialDecay(LearningRateSchedule):
    """(initial - end) * (1 - step / decay_steps)^power + end, held at the end rate
    after `decay_steps`; with `cycle` the horizon grows to the next multiple of
    `decay_steps` instead, so the rate rises again and decays anew.

    >>> s = PolynomialDecay(1.0, decay_steps=10, end_learning_rate=0.0, power=2.0)
    >>> [round(s(k), 4) for k in (0, 5, 10, 20)]
    [1.0, 0.25, 0.0, 0.0]
    """

    def __init__(
        self,
        initial_learning_rate: float,
        decay_steps: int,
        end_learning_rate: float = 0.0001,
        power: float = 1.0,
        cycle: bool = False,
        name: str = "PolynomialDecay",
    ):
        self.initial_learning_rate = _finite("PolynomialDecay", "initial_learning_rate", initial_learning_rate)
        self.decay_steps = _positive_steps("PolynomialDecay", "decay_steps", decay_steps)
        self.end_learning_rate = _finite("PolynomialDecay", "end_learning_rate", end_learning_rate)
        self.power = _finite("PolynomialDecay", "power", power)
        self.cycle = bool(cycle)
        self.name = name

    def __call__(self, step) -> float:
        step, horizon = float(step), float(self.decay_steps)
        if self.cycle:
            horizon *= 1.0 if step == 0 else math.ceil(step / self.decay_steps)
        else:
            step = min(step, horizon)
        fraction = step / horizon
        return (self.initial_learning_rate - self.end_learning_rate) * (1.0 - fraction) ** self.power + (
            self.end_learning_rate
        )

    def get_config(self) -> dict:
        return {
            "initial_learning_rate": self.initial_learning_rate,
            "decay_steps": self.decay_steps,
            "end_learning_rate": self.end_learning_rate,
            "power": self.power,
            "cycle": self.cycle,
            "name": self.name,
        }


class InverseTimeDecay(LearningRateSchedule):
    """initial_learning_rate / (1 + decay_rate * step / decay_steps); with `staircase`
    the ratio step / decay_steps is floored.

    >>> s = InverseTimeDecay(1.0, decay_steps=2, decay_rate=0.5)
    >>> [s(k) for k in (0, 2, 4)]
    [1.0, 0.6666666666666666, 0.5]
    """

    def __init__(
        self,
        initial_learning_rate: float,
        decay_steps: int,
        decay_rate: float,
        staircase: bool = False,
        name: str = "InverseTimeDecay",
    ):
        self.initial_learning_rate = _finite("InverseTimeDecay", "initial_learning_rate", initial_learning_rate)
        self.decay_steps = _positive_steps("InverseTimeDecay", "decay_steps", decay_steps)
        self.decay_rate = _finite("InverseTimeDecay", "decay_rate", decay_rate)
        self.staircase = bool(staircase)
        self.name = name

    def __call__(self, step) -> float:
        p = float(step) / self.decay_steps
        if self.staircase:
            p = math.floor(p)
        return self.initial_learning_rate / (1.0 + self.decay_rate * p)

    def get_config(self) -> dict:
        return {
            "initial_learning_rate": self.initial_learning_rate,
            "decay_steps": self.decay_steps,
            "decay_rate": self.decay_rate,
            "staircase": self.staircase,
            "name": self.name,
        }


class CosineDecayRestarts(LearningRateSchedule):
    """Cosine decay with warm restarts (SGDR, Loshchilov and Hutter): each period decays
    from its peak to alpha * peak; a period lasts t_mul times the one before (the first
    `first_decay_steps`) and its peak is m_mul times the one before.

    >>> s = CosineDecayRestarts(1.0, first_decay_steps=4, t_mul=2.0, m_mul=0.5)
    >>> [round(s(k), 4) for k in (0, 2, 4, 8, 12)]
    [1.0, 0.5, 0.5, 0.25, 0.25]
    """

    def __init__(
        self,
        initial_learning_rate: float,
        first_decay_steps: int,
        t_mul: float = 2.0,
        m_mul: float = 1.0,
        alpha: float = 0.0,
        name: str = "SGDRDecay",
    ):
        owner = "CosineDecayRestarts"
        self.initial_learning_rate = _finite(owner, "initial_learning_rate", initial_learning_rate)
        self.first_decay_steps = _positive_steps(owner, "first_decay_steps", first_decay_steps)
        self.t_mul = _finite(owner, "t_mul", t_mul)
        self.m_mul = _finite(owner, "m_mul", m_mul)
        self.alpha = _finite(owner, "alpha", alpha)
        self.name = name

    def __call__(self, step) -> float:
        fraction = float(step) / self.first_decay_steps
        if self.t_mul == 1.0:
            restart = math.floor(fraction)
            fraction -= restart
        else:
            restart = math.floor(math.log(1.0 - fraction * (1.0 - self.t_mul)) / math.log(self.t_mul))
            done = (1.0 - self.t_mul**restart) / (1.0 - self.t_mul)
            fraction = (fraction - done) / self.t_mul**restart
        cosine = 0.5 * self.m_mul**restart * (1.0 + math.cos(math.pi * fraction))
        return self.initial_learning_rate * ((1.0 - self.alpha) * cosine + self.alpha)

    def get_config(self) -> dict:
        return {
            "initial_learning_rate": self.initial_learning_rate,
            "first_decay_steps": self.first_decay_steps,
            "t_mul": self.t_mul,
            "m_mul": self.m_mul,
            "alpha": self.alpha,
            "name": self.name,
        }


_SCHEDULES = {
    cls.__name__: cls
    for cls in (
        ExponentialDecay,
        CosineDecay,
        PiecewiseConstantDecay,
        PolynomialDecay,
        InverseTimeDecay,
        CosineDecayRestarts,
    )
}


def serialize(schedule: LearningRateSchedule) -> dict:
    """{"class_name": ..., "config": ...} for a schedule, as Keras writes it.

    >>> serialize(PiecewiseConstantDecay([5], [1.0, 0.1]))["class_name"]
    'PiecewiseConstantDecay'
    """
    return serialization.serialize(schedule)


def deserialize(config: dict, custom_objects: dict | None = None) -> LearningRateSchedule:
    """The schedule that `serialize` described.

    >>> deserialize(serialize(ExponentialDecay(0.1, 5, 0.5)))(5)
    0.05
    """
    with serialization.custom_object_scope(custom_objects):
        return serialization.deserialize(config, LearningRateSchedule, _SCHEDULES.get, "schedules.deserialize")
