"""SGD with optional momentum and Nesterov momentum."""

from __future__ import annotations

from tapeflow.ops.optim import sgd_momentum_update
from tapeflow.optimizers.optimizer import Optimizer, _nonnegative
from tapeflow.tensor import Variable


class SGD(Optimizer):
    """Gradient descent, with optional (Nesterov) momentum, as in Keras:
    m = momentum * m - lr * g; w += m (Nesterov: w += momentum * m - lr * g).
    A sparse gradient updates only its rows, momentum included (untouched rows keep
    their momentum instead of decaying it), as TensorFlow's sparse momentum does.

    >>> import tapeflow as tp
    >>> w = tp.Variable([1.0])
    >>> SGD(0.5).apply_gradients([(tp.tensor([2.0]), w)])
    >>> w.numpy().tolist()
    [0.0]
    """

    def __init__(self, learning_rate=0.01, momentum: float = 0.0, nesterov: bool = False, name: str = "SGD", **kwargs):
        super().__init__(learning_rate, name=name, **kwargs)
        self.momentum = _nonnegative("SGD", "momentum", momentum, upper=1.0)
        self.nesterov = bool(nesterov)

    def slot_initials(self, variable: Variable) -> dict[str, float]:
        return {"momentum": 0.0} if self.momentum else {}

    def update_rule(self, gradient, value, slots, learning_rate):
        if not self.momentum:
            return value - gradient * learning_rate, {}
        p_new, m_new = sgd_momentum_update(
            value, slots["momentum"], gradient, learning_rate, self.momentum, self.nesterov
        )
        return p_new, {"momentum": m_new}

    def get_config(self) -> dict:
        return {**super().get_config(), "momentum": self.momentum, "nesterov": self.nesterov}
