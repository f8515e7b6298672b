"""Adafactor: second moments of matrices kept as row and column averages."""

from __future__ import annotations

import math

from tapeflow.ops.math import maximum, minimum, sqrt, square
from tapeflow.ops.reduce import mean
from tapeflow.optimizers.optimizer import Optimizer, _nonnegative
from tapeflow.tensor import Tensor, Variable


def _rms(x) -> Tensor:
    return sqrt(mean(square(x)))


def _inverse_sqrt(step):
    return 1.0 / sqrt(step) if isinstance(step, Tensor) else 1.0 / math.sqrt(step)


def _smaller(a, b):
    return minimum(a, b) if isinstance(a, Tensor) or isinstance(b, Tensor) else min(a, b)


class Adafactor(Optimizer):
    """Adafactor (Shazeer and Stern) in the Keras form. For a variable of rank >= 2 the
    second moment is rebuilt from running means of the squared gradient over its last
    axis ("r") and its second-to-last axis ("c"); the slots hold them broadcast to the
    variable's shape. Steps are scaled by max(epsilon_2, rms(w)) and by
    min(learning_rate, 1 / sqrt(t)) and clipped to an rms of `clip_threshold`. As in
    Keras, that bound applies whatever `relative_step` says (the argument is kept in
    the config).

    >>> import tapeflow as tp
    >>> w = tp.Variable([[1.0, 2.0], [3.0, 4.0]])
    >>> Adafactor(learning_rate=0.1).apply_gradients([(tp.ones((2, 2)), w)])
    >>> [round(x, 4) for x in w.numpy().ravel().tolist()]
    [0.7261, 1.7261, 2.7261, 3.7261]
    """

    def __init__(
        self,
        learning_rate=0.001,
        beta_2_decay: float = -0.8,
        epsilon_1: float = 1e-30,
        epsilon_2: float = 1e-3,
        clip_threshold: float = 1.0,
        relative_step: bool = True,
        name: str = "adafactor",
        **kwargs,
    ):
        super().__init__(learning_rate, name=name, **kwargs)
        self.beta_2_decay = float(beta_2_decay)
        self.epsilon_1 = _nonnegative("Adafactor", "epsilon_1", epsilon_1)
        self.epsilon_2 = _nonnegative("Adafactor", "epsilon_2", epsilon_2)
        self.clip_threshold = _nonnegative("Adafactor", "clip_threshold", clip_threshold)
        self.relative_step = bool(relative_step)

    def slot_initials(self, variable: Variable) -> dict[str, float]:
        return {"r": 0.0, "c": 0.0, "velocity": 0.0} if len(variable.shape) >= 2 else {"velocity": 0.0}

    def update_step(self, gradient, variable: Variable, learning_rate) -> None:
        slots = self.slots(variable)
        step = self._step
        rho = _smaller(learning_rate, _inverse_sqrt(step))
        alpha = maximum(_rms(variable), self.epsilon_2) * rho
        squared = square(gradient) + self.epsilon_1
        beta = 1.0 - step**self.beta_2_decay
        if len(variable.shape) >= 2:
            r = slots["r"] * beta + mean(squared, -1, keepdims=True) * (1.0 - beta)
            c = slots["c"] * beta + mean(squared, -2, keepdims=True) * (1.0 - beta)
            v = r / mean(r, -2, keepdims=True) * c
            slots["r"].assign(r)
            slots["c"].assign(c)
        else:
            v = slots["velocity"] * beta + squared * (1.0 - beta)
        slots["velocity"].assign(v)
        u = gradient / sqrt(v)
        u = u / maximum(_rms(u) / self.clip_threshold, 1.0)
        variable.assign(variable - u * alpha)

    def get_config(self) -> dict:
        return {
            **super().get_config(),
            "beta_2_decay": self.beta_2_decay,
            "epsilon_1": self.epsilon_1,
            "epsilon_2": self.epsilon_2,
            "clip_threshold": self.clip_threshold,
            "relative_step": self.relative_step,
        }
