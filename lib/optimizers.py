"""Optimizers: turn gradients into Variable updates.

>>> import tapeflow as tp
>>> w = tp.Variable([1.0, 2.0])
>>> opt = tp.optimizers.Adam(learning_rate=0.1)
>>> opt.apply_gradients([(tp.tensor([1.0, -1.0]), w)])
>>> [round(x, 3) for x in w.numpy().tolist()]
[0.9, 2.1]
"""

from __future__ import annotations

from tapeflow.ops.creation import zeros_like
from tapeflow.ops.optim import adam_update
from tapeflow.tensor import Tensor, Variable


class Optimizer:
    """Base class: keeps per-variable slots and a step counter."""

    def __init__(self, learning_rate: float = 0.01, name: str = "optimizer"):
        if learning_rate <= 0:
            raise ValueError(f"{type(self).__name__}: learning_rate must be positive, got {learning_rate}")
        self.learning_rate = float(learning_rate)
        self.name = name
        self.iterations = 0
        self._slots: dict[int, dict[str, Variable]] = {}

    def slot(self, var: Variable, name: str) -> Variable:
        """The optimizer state `name` kept for `var` (zeros at first)."""
        slots = self._slots.setdefault(id(var), {})
        if name not in slots:
            slots[name] = Variable(zeros_like(var), trainable=False, name=f"{var.name}/{name}")
        return slots[name]

    def apply_gradients(self, grads_and_vars) -> None:
        """Update each variable from its gradient; pairs whose gradient is None are skipped."""
        pairs = [(g, v) for g, v in grads_and_vars if g is not None]
        for g, v in pairs:
            if not isinstance(v, Variable):
                raise TypeError(f"{type(self).__name__}.apply_gradients: expected Variables, got {type(v).__name__}")
            if not isinstance(g, Tensor) or g.shape != v.shape:
                raise ValueError(
                    f"{type(self).__name__}.apply_gradients: gradient of shape "
                    f"{getattr(g, 'shape', None)} for variable '{v.name}' of shape {v.shape}"
                )
        self.iterations += 1
        for g, v in pairs:
            self.update(v, g)

    def update(self, var: Variable, grad: Tensor) -> None:
        raise NotImplementedError


class SGD(Optimizer):
    """Plain gradient descent: var -= learning_rate * grad."""

    def __init__(self, learning_rate: float = 0.01, name: str = "SGD"):
        super().__init__(learning_rate, name)

    def update(self, var: Variable, grad: Tensor) -> None:
        var.assign_sub(grad * self.learning_rate)


class Adam(Optimizer):
    """Adam with bias correction, run as one fused update per variable."""

    def __init__(
        self,
        learning_rate: float = 0.001,
        beta_1: float = 0.9,
        beta_2: float = 0.999,
        epsilon: float = 1e-7,
        name: str = "Adam",
    ):
        super().__init__(learning_rate, name)
        self.beta_1, self.beta_2, self.epsilon = float(beta_1), float(beta_2), float(epsilon)

    def update(self, var: Variable, grad: Tensor) -> None:
        m, v = self.slot(var, "m"), self.slot(var, "v")
        p_new, m_new, v_new = adam_update(
            var, m, v, grad, self.learning_rate, self.iterations, self.beta_1, self.beta_2, self.epsilon
        )
        var.assign(p_new)
        m.assign(m_new)
        v.assign(v_new)
