"""Lion: steps of fixed size in the sign of an interpolated momentum."""

from __future__ import annotations

from tapeflow.ops.math import sign
from tapeflow.optimizers.optimizer import Optimizer, _nonnegative
from tapeflow.tensor import Variable


class Lion(Optimizer):
    """Lion (Chen et al.): w -= lr * sign(b1 m + (1 - b1) g); m = b2 m + (1 - b2) g.
    `beta_1` must lie in (0, 1].

    >>> import tapeflow as tp
    >>> w = tp.Variable([1.0, 2.0])
    >>> Lion(learning_rate=0.1).apply_gradients([(tp.tensor([3.0, -0.5]), w)])
    >>> [round(x, 3) for x in w.numpy().tolist()]
    [0.9, 2.1]
    """

    def __init__(self, learning_rate=0.001, beta_1: float = 0.9, beta_2: float = 0.99, name: str = "lion", **kwargs):
        super().__init__(learning_rate, name=name, **kwargs)
        if isinstance(beta_1, bool) or not isinstance(beta_1, int | float) or not 0 < beta_1 <= 1:
            raise ValueError(f"Lion: beta_1 must be in (0, 1] (0 makes it sign SGD), got {beta_1!r}")
        self.beta_1 = float(beta_1)
        self.beta_2 = _nonnegative("Lion", "beta_2", beta_2, upper=1.0)

    def slot_initials(self, variable: Variable) -> dict[str, float]:
        return {"momentum": 0.0}

    def update_rule(self, gradient, value, slots, learning_rate):
        m = slots["momentum"]
        step = sign(m * self.beta_1 + gradient * (1.0 - self.beta_1))
        return value - step * learning_rate, {"momentum": m * self.beta_2 + gradient * (1.0 - self.beta_2)}

    def get_config(self) -> dict:
        return {**super().get_config(), "beta_1": self.beta_1, "beta_2": self.beta_2}
