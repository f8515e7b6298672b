"""Nadam: Adam with Nesterov momentum."""

from __future__ import annotations

from tapeflow.ops.math import sqrt, square
from tapeflow.optimizers.optimizer import Optimizer, _nonnegative
from tapeflow.tensor import Variable


class Nadam(Optimizer):
    """Nadam (Dozat) in the Keras form, with the momentum schedule
    u_t = beta_1 * (1 - 0.5 * 0.96^t) and its running product. The product is kept
    beside each variable (the slot "u_product", the variable's shape), so one graph
    serves every step of a frozen train step.

    >>> import tapeflow as tp
    >>> w = tp.Variable([1.0, 2.0])
    >>> Nadam(learning_rate=0.1).apply_gradients([(tp.tensor([1.0, -1.0]), w)])
    >>> [round(x, 3) for x in w.numpy().tolist()]
    [0.894, 2.106]
    """

    def __init__(
        self,
        learning_rate=0.001,
        beta_1: float = 0.9,
        beta_2: float = 0.999,
        epsilon: float = 1e-7,
        name: str = "nadam",
        **kwargs,
    ):
        super().__init__(learning_rate, name=name, **kwargs)
        self.beta_1 = _nonnegative("Nadam", "beta_1", beta_1, upper=1.0, closed=False)
        self.beta_2 = _nonnegative("Nadam", "beta_2", beta_2, upper=1.0, closed=False)
        self.epsilon = _nonnegative("Nadam", "epsilon", epsilon)

    def slot_initials(self, variable: Variable) -> dict[str, float]:
        return {"momentum": 0.0, "velocity": 0.0, "u_product": 1.0}

    def update_rule(self, gradient, value, slots, learning_rate):
        step, b1, b2 = self._step, self.beta_1, self.beta_2
        u_t = b1 * (1.0 - 0.5 * 0.96**step)
        u_next = b1 * (1.0 - 0.5 * 0.96 ** (step + 1))
        u_product = slots["u_product"] * u_t
        m = slots["momentum"] + (gradient - slots["momentum"]) * (1.0 - b1)
        v = slots["velocity"] + (square(gradient) - slots["velocity"]) * (1.0 - b2)
        m_hat = m * u_next / (1.0 - u_product * u_next) + gradient * (1.0 - u_t) / (1.0 - u_product)
        v_hat = v / (1.0 - b2**step)
        new_value = value - m_hat * learning_rate / (sqrt(v_hat) + self.epsilon)
        return new_value, {"momentum": m, "velocity": v, "u_product": u_product}

    def get_config(self) -> dict:
        return {**super().get_config(), "beta_1": self.beta_1, "beta_2": self.beta_2, "epsilon": self.epsilon}
