"""Schedule-free AdamW: Adam steps on a base sequence whose running average is evaluated."""

from __future__ import annotations

from tapeflow.ops.math import equal, minimum, sqrt, square, where
from tapeflow.optimizers.optimizer import Optimizer, _nonnegative
from tapeflow.tensor import Tensor, Variable


class ScheduleFreeAdamW(Optimizer):
    """Schedule-free AdamW (Defazio et al.) in the Keras form: Adam-scaled steps move a
    base sequence z (the slot "momentum", which starts at the weights), the weights follow
    y = (1 - beta_1) z + beta_1 x with x the uniform average of z, so no learning-rate
    decay schedule is needed; `warmup_steps` ramps the rate up linearly. With
    `weight_decay`, z starts from the weights after the first decay.

    >>> import tapeflow as tp
    >>> w = tp.Variable([1.0, 2.0])
    >>> ScheduleFreeAdamW(learning_rate=0.1).apply_gradients([(tp.tensor([1.0, -1.0]), w)])
    >>> [round(x, 3) for x in w.numpy().tolist()]
    [0.9, 2.1]
    """

    def __init__(
        self,
        learning_rate=0.0025,
        beta_1: float = 0.9,
        beta_2: float = 0.999,
        epsilon: float = 1e-8,
        warmup_steps: int = 0,
        name: str = "schedule_free_adam_w",
        **kwargs,
    ):
        super().__init__(learning_rate, name=name, **kwargs)
        owner = "ScheduleFreeAdamW"
        self.beta_1 = _nonnegative(owner, "beta_1", beta_1, upper=1.0, closed=False)
        if self.beta_1 == 0:
            raise ValueError(f"{owner}: beta_1 must be > 0, got {beta_1!r}")
        self.beta_2 = _nonnegative(owner, "beta_2", beta_2, upper=1.0, closed=False)
        self.epsilon = _nonnegative(owner, "epsilon", epsilon)
        if isinstance(warmup_steps, bool) or not isinstance(warmup_steps, int) or warmup_steps < 0:
            raise ValueError(f"{owner}: warmup_steps must be an int >= 0, got {warmup_steps!r}")
        self.warmup_steps = warmup_steps

    def slot_initials(self, variable: Variable) -> dict[str, float]:
        return {"momentum": 0.0, "velocity": 0.0}

    def update_rule(self, gradient, value, slots, learning_rate):
        step, b1, b2 = self._step, self.beta_1, self.beta_2
        if self.warmup_steps > 0:
            ramp = step / self.warmup_steps
            learning_rate = learning_rate * (minimum(ramp, 1.0) if isinstance(ramp, Tensor) else min(ramp, 1.0))
        if isinstance(step, Tensor):  # inside a frozen train step: z starts at the weights on step 1
            z_old = where(equal(step, 1.0), value, slots["momentum"])
        else:
            z_old = value if step == 1 else slots["momentum"]
        v = slots["velocity"] + (square(gradient) - slots["velocity"]) * (1.0 - b2)
        z = z_old - gradient * learning_rate / (sqrt(v / (1.0 - b2**step)) + self.epsilon)
        weight = 1.0 / step
        x_old = (value - z_old * (1.0 - b1)) / b1
        x = x_old * (1.0 - weight) + z * weight
        return z * (1.0 - b1) + x * b1, {"momentum": z, "velocity": v}

    def get_config(self) -> dict:
        return {
            **super().get_config(),
            "beta_1": self.beta_1,
            "beta_2": self.beta_2,
            "epsilon": self.epsilon,
            "warmup_steps": self.warmup_steps,
        }
