"""LAMB: Adam steps rescaled per variable by the trust ratio ||w|| / ||step||."""

from __future__ import annotations

from tapeflow.ops.math import sqrt, square, where
from tapeflow.ops.reduce import sum as reduce_sum
from tapeflow.optimizers.optimizer import Optimizer, _nonnegative
from tapeflow.tensor import Variable


class Lamb(Optimizer):
    """LAMB (You et al.) in the Keras form: the bias-corrected Adam direction
    r = m_hat / (sqrt(v_hat) + epsilon) is scaled by ||w|| / ||r|| (1 where either norm
    is 0); w -= lr * ratio * r. The norms span the whole variable, so a sparse gradient
    updates it densely.

    >>> import tapeflow as tp
    >>> w = tp.Variable([3.0, 4.0])
    >>> Lamb(learning_rate=0.1).apply_gradients([(tp.tensor([1.0, 1.0]), w)])
    >>> [round(x, 3) for x in w.numpy().tolist()]
    [2.646, 3.646]
    """

    def __init__(
        self,
        learning_rate=0.001,
        beta_1: float = 0.9,
        beta_2: float = 0.999,
        epsilon: float = 1e-7,
        name: str = "lamb",
        **kwargs,
    ):
        super().__init__(learning_rate, name=name, **kwargs)
        self.beta_1 = _nonnegative("Lamb", "beta_1", beta_1, upper=1.0, closed=False)
        self.beta_2 = _nonnegative("Lamb", "beta_2", beta_2, upper=1.0, closed=False)
        self.epsilon = _nonnegative("Lamb", "epsilon", epsilon)

    def slot_initials(self, variable: Variable) -> dict[str, float]:
        return {"momentum": 0.0, "velocity": 0.0}

    def update_step(self, gradient, variable: Variable, learning_rate) -> None:
        slots = self.slots(variable)
        step = self._step
        m = slots["momentum"] + (gradient - slots["momentum"]) * (1.0 - self.beta_1)
        v = slots["velocity"] + (square(gradient) - slots["velocity"]) * (1.0 - self.beta_2)
        direction = (m / (1.0 - self.beta_1**step)) / (sqrt(v / (1.0 - self.beta_2**step)) + self.epsilon)
        w_norm = sqrt(reduce_sum(square(variable)))
        r_norm = sqrt(reduce_sum(square(direction)))
        ratio = where(w_norm > 0.0, where(r_norm > 0.0, w_norm / where(r_norm > 0.0, r_norm, 1.0), 1.0), 1.0)
        slots["momentum"].assign(m)
        slots["velocity"].assign(v)
        variable.assign(variable - direction * (ratio * learning_rate))

    def get_config(self) -> dict:
        return {**super().get_config(), "beta_1": self.beta_1, "beta_2": self.beta_2, "epsilon": self.epsilon}
