"""FTRL-Proximal: follow the regularized leader, with L1 and L2 penalties."""

from __future__ import annotations

from tapeflow.ops.math import clip, square
from tapeflow.ops.math import pow as tpow
from tapeflow.optimizers.optimizer import Optimizer, _nonnegative
from tapeflow.tensor import Variable


class Ftrl(Optimizer):
    """FTRL-Proximal (McMahan et al.) in the Keras form, for shallow models with large
    sparse features: an accumulator of squared gradients and a "linear" term give the
    weights in closed form, with `l1_regularization_strength` making them exactly zero.

    >>> import tapeflow as tp
    >>> w = tp.Variable([1.0])
    >>> Ftrl(learning_rate=0.1).apply_gradients([(tp.tensor([1.0]), w)])
    >>> [round(x, 4) for x in w.numpy().tolist()]
    [0.6031]
    """

    def __init__(
        self,
        learning_rate=0.001,
        learning_rate_power: float = -0.5,
        initial_accumulator_value: float = 0.1,
        l1_regularization_strength: float = 0.0,
        l2_regularization_strength: float = 0.0,
        l2_shrinkage_regularization_strength: float = 0.0,
        beta: float = 0.0,
        name: str = "ftrl",
        **kwargs,
    ):
        super().__init__(learning_rate, name=name, **kwargs)
        if not learning_rate_power <= 0.0:
            raise ValueError(f"Ftrl: learning_rate_power must be <= 0, got {learning_rate_power!r}")
        self.learning_rate_power = float(learning_rate_power)
        self.initial_accumulator_value = _nonnegative("Ftrl", "initial_accumulator_value", initial_accumulator_value)
        self.l1_regularization_strength = _nonnegative("Ftrl", "l1_regularization_strength", l1_regularization_strength)
        self.l2_regularization_strength = _nonnegative("Ftrl", "l2_regularization_strength", l2_regularization_strength)
        self.l2_shrinkage_regularization_strength = _nonnegative(
            "Ftrl", "l2_shrinkage_regularization_strength", l2_shrinkage_regularization_strength
        )
        self.beta = float(beta)

    def slot_initials(self, variable: Variable) -> dict[str, float]:
        return {"accumulator": self.initial_accumulator_value, "linear": 0.0}

    def update_rule(self, gradient, value, slots, learning_rate):
        accum, linear = slots["accumulator"], slots["linear"]
        power = -self.learning_rate_power
        l1 = self.l1_regularization_strength
        l2 = self.l2_regularization_strength + self.beta / (2.0 * learning_rate)
        shrunk = gradient + value * (2.0 * self.l2_shrinkage_regularization_strength)
        new_accum = accum + square(gradient)
        new_linear = linear + shrunk - (tpow(new_accum, power) - tpow(accum, power)) / learning_rate * value
        quadratic = tpow(new_accum, power) / learning_rate + 2.0 * l2
        new_value = (clip(new_linear, -l1, l1) - new_linear) / quadratic
        return new_value, {"accumulator": new_accum, "linear": new_linear}

    def get_config(self) -> dict:
        return {
            **super().get_config(),
            "learning_rate_power": self.learning_rate_power,
            "initial_accumulator_value": self.initial_accumulator_value,
            "l1_regularization_strength": self.l1_regularization_strength,
            "l2_regularization_strength": self.l2_regularization_strength,
            "l2_shrinkage_regularization_strength": self.l2_shrinkage_regularization_strength,
            "beta": self.beta,
        }
