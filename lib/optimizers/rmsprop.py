"""RMSprop: rates scaled by a moving average of squared gradients."""

from __future__ import annotations

from tapeflow.ops.optim import rmsprop_update
from tapeflow.optimizers.optimizer import Optimizer, _nonnegative
from tapeflow.tensor import Variable


class RMSprop(Optimizer):
    """Divide each gradient by a running root mean square, as in Keras:
    v = rho v + (1 - rho) g^2; w -= lr g / sqrt(v + epsilon) (epsilon inside the
    root); `centered` subtracts the squared running mean of g; `momentum`
    accumulates the increments.

    >>> import tapeflow as tp
    >>> x = tp.Variable(10.0)
    >>> _ = RMSprop(learning_rate=0.1).minimize(lambda: x * x / 2.0, [x])
    >>> round(float(x), 5)
    9.68377
    """

    def __init__(
        self,
        learning_rate=0.001,
        rho: float = 0.9,
        momentum: float = 0.0,
        epsilon: float = 1e-7,
        centered: bool = False,
        name: str = "rmsprop",
        **kwargs,
    ):
        super().__init__(learning_rate, name=name, **kwargs)
        self.rho = _nonnegative("RMSprop", "rho", rho, upper=1.0)
        self.momentum = _nonnegative("RMSprop", "momentum", momentum)
        self.epsilon = _nonnegative("RMSprop", "epsilon", epsilon)
        self.centered = bool(centered)

    def slot_initials(self, variable: Variable) -> dict[str, float]:
        names = ["velocity"] + ["momentum"] * (self.momentum > 0) + ["average_gradient"] * self.centered
        return dict.fromkeys(names, 0.0)

    def update_rule(self, gradient, value, slots, learning_rate):
        p_new, *new = rmsprop_update(
            value,
            slots["velocity"],
            gradient,
            learning_rate,
            moment=slots.get("momentum"),
            average_gradient=slots.get("average_gradient"),
            rho=self.rho,
            momentum=self.momentum,
            epsilon=self.epsilon,
            centered=self.centered,
        )
        names = ["velocity"] + ["momentum"] * (self.momentum > 0) + ["average_gradient"] * self.centered
        return p_new, dict(zip(names, new, strict=True))

    def get_config(self) -> dict:
        return {
            **super().get_config(),
            "rho": self.rho,
            "momentum": self.momentum,
            "epsilon": self.epsilon,
            "centered": self.centered,
        }
