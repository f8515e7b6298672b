"""Adamax: Adam with the infinity norm of past gradients in place of their root mean square."""

from __future__ import annotations

from tapeflow.ops.math import abs as tabs
from tapeflow.ops.math import maximum
from tapeflow.optimizers.optimizer import Optimizer, _nonnegative
from tapeflow.tensor import Variable


class Adamax(Optimizer):
    """Adamax (Kingma and Ba) in the Keras form: m = b1 m + (1 - b1) g;
    u = max(b2 u, |g|); w -= lr * m / ((1 - b1^t) * (u + epsilon)).

    >>> import tapeflow as tp
    >>> w = tp.Variable([1.0, 2.0])
    >>> Adamax(learning_rate=0.1).apply_gradients([(tp.tensor([1.0, -1.0]), w)])
    >>> [round(x, 3) for x in w.numpy().tolist()]
    [0.9, 2.1]
    """

    def __init__(
        self,
        learning_rate=0.001,
        beta_1: float = 0.9,
        beta_2: float = 0.999,
        epsilon: float = 1e-7,
        name: str = "adamax",
        **kwargs,
    ):
        super().__init__(learning_rate, name=name, **kwargs)
        self.beta_1 = _nonnegative("Adamax", "beta_1", beta_1, upper=1.0, closed=False)
        self.beta_2 = _nonnegative("Adamax", "beta_2", beta_2, upper=1.0)
        self.epsilon = _nonnegative("Adamax", "epsilon", epsilon)

    def slot_initials(self, variable: Variable) -> dict[str, float]:
        return {"momentum": 0.0, "norm": 0.0}

    def update_rule(self, gradient, value, slots, learning_rate):
        m = slots["momentum"] + (gradient - slots["momentum"]) * (1.0 - self.beta_1)
        u = maximum(slots["norm"] * self.beta_2, tabs(gradient))
        correction = 1.0 - self.beta_1**self._step
        return value - m * learning_rate / ((u + self.epsilon) * correction), {"momentum": m, "norm": u}

    def get_config(self) -> dict:
        return {**super().get_config(), "beta_1": self.beta_1, "beta_2": self.beta_2, "epsilon": self.epsilon}
