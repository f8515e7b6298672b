"""Dynamic loss scaling around another optimizer, for float16 training (see
`tapeflow.mixed_precision`).

>>> import tapeflow as tp
>>> tp.optimizers.LossScaleOptimizer(tp.optimizers.SGD(0.1)).dynamic_growth_steps
2000
"""

from __future__ import annotations

import numpy as np

from tapeflow.ops.creation import full
from tapeflow.ops.math import abs as abs_
from tapeflow.ops.math import cast, divide, equal, less_equal, logical_and, logical_not, multiply, where
from tapeflow.ops.reduce import sum as reduce_sum
from tapeflow.optimizers.optimizer import Optimizer
from tapeflow.tensor import Tensor, Variable, eager_scope

__all__ = ["LossScaleOptimizer"]

_BASE_DEFAULTS = {
    "weight_decay": None,
    "clipnorm": None,
    "global_clipnorm": None,
    "clipvalue": None,
    "use_ema": False,
    "ema_momentum": 0.99,
    "ema_overwrite_frequency": None,
    "loss_scale_factor": None,
    "gradient_accumulation_steps": None,
}


class LossScaleOptimizer(Optimizer):
    """Dynamic loss scaling around another optimizer, for float16 training.

    The loss is multiplied by `scale` before differentiating (`scale_loss`), so small
    float16 gradients do not flush to zero; `apply_gradients` divides the gradients by
    it again. A step whose gradients hold an inf or NaN changes no variable or slot and
    halves the scale; after `dynamic_growth_steps` finite steps in a row the scale
    doubles. The decisions are tensor ops (no Python branch on a value), so the same code
    runs eagerly and inside a frozen train step. A skipped step still counts as an
    iteration of the inner optimizer.

    >>> import tapeflow as tp
    >>> w = tp.Variable([1.0], name="w")
    >>> opt = LossScaleOptimizer(tp.optimizers.SGD(0.1), initial_scale=8.0)
    >>> with tp.GradientTape() as tape:
    ...     loss = opt.scale_loss(tp.sum(w * 3.0))
    >>> opt.apply_gradients(zip(tape.gradient(loss, [w]), [w]))
    >>> round(float(w.numpy()[0]), 4), float(opt.scale)
    (0.7, 8.0)
    """

    def __init__(
        self,
        inner_optimizer: Optimizer,
        initial_scale: float = 2.0**15,
        dynamic_growth_steps: int = 2000,
        name: str | None = None,
        **kwargs,
    ):
        for arg, default in _BASE_DEFAULTS.items():  # a saved config may hold them at their defaults
            if arg in kwargs and kwargs.pop(arg) != default:
                raise ValueError(f"LossScaleOptimizer does not support `{arg}`: set it on the inner optimizer instead")
        if kwargs:
            raise ValueError(f"LossScaleOptimizer does not support arguments {sorted(kwargs)}")
        if not isinstance(inner_optimizer, Optimizer) or isinstance(inner_optimizer, LossScaleOptimizer):
            raise TypeError(f"LossScaleOptimizer: expected an Optimizer to wrap, got {type(inner_optimizer).__name__}")
        if not initial_scale > 0 or int(dynamic_growth_steps) < 1:
            raise ValueError(
                f"LossScaleOptimizer: initial_scale must be > 0 and dynamic_growth_steps >= 1, "
                f"got {initial_scale!r} and {dynamic_growth_steps!r}"
            )
        super().__init__(learning_rate=0.0, name=name or "loss_scale_optimizer")
        self.inner_optimizer = inner_optimizer
        self.initial_scale = float(initial_scale)
        self.dynamic_growth_steps = int(dynamic_growth_steps)
        self._scale = None  # Variables made with the first variables seen, on their device
        self._good_steps = None

    # ------------------------------------------------ the inner optimizer's face
    @property
    def learning_rate(self) -> float:
        return self.inner_optimizer.learning_rate

    @learning_rate.setter
    def learning_rate(self, value) -> None:
        if hasattr(self, "inner_optimizer"):
            self.inner_optimizer.learning_rate = value

    @property
    def iterations(self) -> int:
        return self.inner_optimizer.iterations if hasattr(self, "inner_optimizer") else 0

    @iterations.setter
    def iterations(self, value) -> None:
        if hasattr(self, "inner_optimizer"):
            self.inner_optimizer.iterations = value

    def build(self, var_list) -> None:
        var_list = list(var_list)
        self.inner_optimizer.build(var_list)
        self._make_scale(var_list)

    @property
    def variables(self) -> list[Variable]:
        own = [v for v in (self._scale, self._good_steps) if v is not None]
        return self.inner_optimizer.variables + own

    def get_state(self):
        return self.inner_optimizer.get_state()

    def finalize_variable_values(self, var_list) -> None:
        self.inner_optimizer.finalize_variable_values(var_list)

    def set_state(self, state: dict, var_list=None) -> None:
        self.inner_optimizer.set_state(state, var_list)

    def get_config(self) -> dict:
        return {
            "name": self.name,
            "inner_optimizer": {"class_name": type(self.inner_optimizer).__name__, **self.inner_optimizer.get_config()},
            "initial_scale": self.initial_scale,
            "dynamic_growth_steps": self.dynamic_growth_steps,
        }

    # ------------------------------------------------ scaling
    @property
    def scale(self) -> Tensor:
        """The current loss scale (a float32 scalar)."""
        return self._scale.read_value() if self._scale is not None else Tensor(self.initial_scale)

    def _make_scale(self, variables) -> None:
        if self._scale is not None:
            return
        device = variables[0].device if variables else None
        with eager_scope():
            scale = full((), self.initial_scale, "float32", device=device)
            self._scale = Variable(scale, trainable=False, name=f"{self.name}/scale")
            good = full((), 0.0, "float32", device=device)
            self._good_steps = Variable(good, trainable=False, name=f"{self.name}/good_steps")

    def scale_loss(self, loss):
        """`loss * scale`, in the loss's dtype: differentiate this instead of the loss."""
        if self._scale is None:
            return multiply(loss, self.initial_scale)
        return multiply(loss, cast(self._scale, loss.dtype))

    def _apply_pairs(self, pairs, lr, step) -> None:
        self._make_scale([v for _, v in pairs])
        inner = self.inner_optimizer
        inverse = divide(1.0, self._scale.read_value())
        grads = [multiply(cast(g, v.dtype), cast(inverse, v.dtype)) for g, v in pairs]
        finite = None
        for g in grads:  # |g| <= the largest float is False for inf and NaN alike
            largest = float(np.finfo(g.dtype.np).max)
            ok = equal(reduce_sum(cast(logical_not(less_equal(abs_(g), largest)), "float32")), 0.0)
            finite = ok if finite is None else logical_and(finite, ok)
        variables = [v for _, v in pairs]
        kept = variables + [slot for v in variables for slot in inner.slots(v).values()]
        before = [v.read_value() for v in kept]
        safe = [where(finite, g, 0.0) for g in grads]
        inner._apply_pairs(list(zip(safe, variables, strict=True)), lr, step)
        for var, old in zip(kept, before, strict=True):
            var.assign(where(finite, var.read_value(), old))
        good = where(finite, self._good_steps.read_value() + 1.0, 0.0)
        grow = good >= float(self.dynamic_growth_steps)
        scale = self._scale.read_value()
        self._scale.assign(where(finite, where(grow, scale * 2.0, scale), scale * 0.5))
        self._good_steps.assign(where(grow, 0.0, good))
