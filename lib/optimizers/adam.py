"""Adam and AdamW (decoupled weight decay)."""

from __future__ import annotations

import math

from tapeflow.ops.math import maximum, sqrt, square
from tapeflow.ops.optim import adam_update, adamw_update, sparse_adam_update
from tapeflow.optimizers.optimizer import Optimizer, _nonnegative
from tapeflow.tensor import TRACING, Tensor, Variable


class Adam(Optimizer):
    """Adam (Kingma and Ba) in the Keras form, with epsilon added to sqrt(v) before
    bias correction: w -= lr * sqrt(1 - b2^t) / (1 - b1^t) * m / (sqrt(v) + epsilon).
    `amsgrad` divides by the running maximum of v instead.

    A sparse gradient (an IndexedSlices, as from an Embedding) makes Adam lazy, as
    TensorFlow's LazyAdam: only the rows in the batch update m, v and the weights. Dense
    Adam would also decay m and v of every other row and keep moving those rows by the
    decayed momentum; lazy Adam leaves them as they are until their row appears again,
    and the bias correction uses the global step count. The two agree on the first step
    and on rows present in every batch; they drift apart on rare rows, which is the
    point: a step costs the batch's rows, not the table's.

    >>> import tapeflow as tp
    >>> w = tp.Variable([1.0, 2.0])
    >>> Adam(learning_rate=0.1).apply_gradients([(tp.tensor([1.0, -1.0]), w)])
    >>> [round(x, 3) for x in w.numpy().tolist()]
    [0.9, 2.1]
    """

    _rule_decays = True  # a dense gradient's step decays the weights in the same op (adamw_update)

    def __init__(
        self,
        learning_rate=0.001,
        beta_1: float = 0.9,
        beta_2: float = 0.999,
        epsilon: float = 1e-7,
        amsgrad: bool = False,
        name: str = "adam",
        **kwargs,
    ):
        super().__init__(learning_rate, name=name, **kwargs)
        owner = type(self).__name__
        self.beta_1 = _nonnegative(owner, "beta_1", beta_1, upper=1.0, closed=False)
        self.beta_2 = _nonnegative(owner, "beta_2", beta_2, upper=1.0, closed=False)
        self.epsilon = _nonnegative(owner, "epsilon", epsilon)
        self.amsgrad = bool(amsgrad)

    def slot_initials(self, variable: Variable) -> dict[str, float]:
        names = ("momentum", "velocity", "velocity_hat") if self.amsgrad else ("momentum", "velocity")
        return dict.fromkeys(names, 0.0)

    def update_rule(self, gradient, value, slots, learning_rate):
        m, v = slots["momentum"], slots["velocity"]
        step = self._step
        b1, b2, decay = self.beta_1, self.beta_2, self._decay
        if not self.amsgrad and decay:
            p_new, m_new, v_new = adamw_update(
                value, m, v, gradient, learning_rate, step, decay, b1, b2, self.epsilon, epsilon_on_sqrt_v=True
            )
            return p_new, {"momentum": m_new, "velocity": v_new}
        if not self.amsgrad:
            p_new, m_new, v_new = adam_update(
                value, m, v, gradient, learning_rate, step, b1, b2, self.epsilon, epsilon_on_sqrt_v=True
            )
            return p_new, {"momentum": m_new, "velocity": v_new}
        if decay:
            value = value - value * (learning_rate * decay)
        m_new = m + (gradient - m) * (1.0 - b1)
        v_new = v + (square(gradient) - v) * (1.0 - b2)
        v_hat = maximum(slots["velocity_hat"], v_new)
        if isinstance(step, Tensor):  # inside a frozen train step
            alpha = learning_rate * sqrt(1.0 - b2**step) / (1.0 - b1**step)
        else:
            alpha = learning_rate * math.sqrt(1.0 - b2**step) / (1.0 - b1**step)
        p_new = value - m_new * alpha / (sqrt(v_hat) + self.epsilon)
        return p_new, {"momentum": m_new, "velocity": v_new, "velocity_hat": v_hat}

    def update_rows(self, gradient, variable, learning_rate) -> None:
        """Lazy Adam's rows in a frozen step: one op (`sparse_adam_update`) that the step runs on
        the variable's own arrays. Eager steps (whose variables write rows in place already) and
        amsgrad's rows go the general way, with the same arithmetic."""
        if self.amsgrad or self._decay or TRACING.tracer is None:
            super().update_rows(gradient, variable, learning_rate)
            return
        slots = self._rule_slots(variable)
        m, v = slots["momentum"], slots["velocity"]
        p_new, m_new, v_new = sparse_adam_update(
            variable,
            m,
            v,
            gradient.indices,
            gradient.values,
            learning_rate,
            self._step,
            self.beta_1,
            self.beta_2,
            self.epsilon,
            epsilon_on_sqrt_v=True,
        )
        m.assign(m_new)
        v.assign(v_new)
        variable.assign(p_new)

    def get_config(self) -> dict:
        return {
            **super().get_config(),
            "beta_1": self.beta_1,
            "beta_2": self.beta_2,
            "epsilon": self.epsilon,
            "amsgrad": self.amsgrad,
        }


class AdamW(Adam):
    """Adam with decoupled weight decay: each step first does
    w -= learning_rate * weight_decay * w (Loshchilov and Hutter).

    >>> import tapeflow as tp
    >>> w = tp.Variable([1.0])
    >>> AdamW(learning_rate=0.1, weight_decay=0.5).apply_gradients([(tp.tensor([0.0]), w)])
    >>> [round(x, 4) for x in w.numpy().tolist()]
    [0.95]
    """

    def __init__(
        self,
        learning_rate=0.001,
        weight_decay: float = 0.004,
        beta_1: float = 0.9,
        beta_2: float = 0.999,
        epsilon: float = 1e-7,
        amsgrad: bool = False,
        name: str = "adamw",
        **kwargs,
    ):
        if weight_decay is None:
            raise ValueError("AdamW: weight_decay must be a number, got None (use Adam for no decay)")
        super().__init__(
            learning_rate, beta_1, beta_2, epsilon, amsgrad, name=name, weight_decay=weight_decay, **kwargs
        )
