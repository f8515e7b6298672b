"""Adadelta: steps scaled by the ratio of running root mean squares of updates and gradients."""

from __future__ import annotations

from tapeflow.ops.math import sqrt, square
from tapeflow.optimizers.optimizer import Optimizer, _nonnegative
from tapeflow.tensor import Variable


class Adadelta(Optimizer):
    """Adadelta (Zeiler) in the Keras form: a = rho a + (1 - rho) g^2;
    d = -sqrt(b + epsilon) / sqrt(a + epsilon) * g; b = rho b + (1 - rho) d^2;
    w += learning_rate * d.

    >>> import tapeflow as tp
    >>> w = tp.Variable([1.0])
    >>> Adadelta(learning_rate=1.0).apply_gradients([(tp.tensor([1.0]), w)])
    >>> [round(x, 5) for x in w.numpy().tolist()]
    [0.99859]
    """

    def __init__(self, learning_rate=0.001, rho: float = 0.95, epsilon: float = 1e-7, name: str = "adadelta", **kwargs):
        super().__init__(learning_rate, name=name, **kwargs)
        self.rho = _nonnegative("Adadelta", "rho", rho, upper=1.0)
        self.epsilon = _nonnegative("Adadelta", "epsilon", epsilon)

    def slot_initials(self, variable: Variable) -> dict[str, float]:
        return {"accumulated_grad": 0.0, "accumulated_delta_var": 0.0}

    def update_rule(self, gradient, value, slots, learning_rate):
        rho, eps = self.rho, self.epsilon
        grads = slots["accumulated_grad"] * rho + square(gradient) * (1.0 - rho)
        delta = -(sqrt(slots["accumulated_delta_var"] + eps) * gradient) / sqrt(grads + eps)
        deltas = slots["accumulated_delta_var"] * rho + square(delta) * (1.0 - rho)
        return value + delta * learning_rate, {"accumulated_grad": grads, "accumulated_delta_var": deltas}

    def get_config(self) -> dict:
        return {**super().get_config(), "rho": self.rho, "epsilon": self.epsilon}
