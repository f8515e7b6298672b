"""Adagrad: per-coordinate rates from the sum of squared gradients."""

from __future__ import annotations

from tapeflow.ops.optim import adagrad_update
from tapeflow.optimizers.optimizer import Optimizer, _nonnegative
from tapeflow.tensor import Variable


class Adagrad(Optimizer):
    """Per-coordinate rates from the sum of squared gradients, as in Keras:
    a += g^2; w -= lr g / sqrt(a + epsilon), with a starting at
    `initial_accumulator_value`.

    >>> import tapeflow as tp
    >>> w = tp.Variable([1.0])
    >>> Adagrad(learning_rate=0.1, initial_accumulator_value=0.0, epsilon=0.0).apply_gradients([(tp.tensor([3.0]), w)])
    >>> [round(x, 6) for x in w.numpy().tolist()]
    [0.9]
    """

    def __init__(
        self,
        learning_rate=0.001,
        initial_accumulator_value: float = 0.1,
        epsilon: float = 1e-7,
        name: str = "adagrad",
        **kwargs,
    ):
        super().__init__(learning_rate, name=name, **kwargs)
        self.initial_accumulator_value = _nonnegative("Adagrad", "initial_accumulator_value", initial_accumulator_value)
        self.epsilon = _nonnegative("Adagrad", "epsilon", epsilon)

    def slot_initials(self, variable: Variable) -> dict[str, float]:
        return {"accumulator": self.initial_accumulator_value}

    def update_rule(self, gradient, value, slots, learning_rate):
        p_new, a_new = adagrad_update(value, slots["accumulator"], gradient, learning_rate, self.epsilon)
        return p_new, {"accumulator": a_new}

    def get_config(self) -> dict:
        return {
            **super().get_config(),
            "initial_accumulator_value": self.initial_accumulator_value,
            "epsilon": self.epsilon,
        }
