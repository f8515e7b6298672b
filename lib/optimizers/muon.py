"""Muon: momentum orthogonalized by Newton-Schulz iterations for matrices, AdamW for the rest."""

from __future__ import annotations

import math
import re

from tapeflow.ops.array import transpose
from tapeflow.ops.math import matmul, sqrt, square
from tapeflow.ops.reduce import sum as reduce_sum
from tapeflow.optimizers.optimizer import Optimizer, _nonnegative
from tapeflow.tensor import Tensor, Variable


class Muon(Optimizer):
    """Muon (Jordan et al.) in the Keras form. A 2-D variable (not an embedding when
    `exclude_embeddings`, and not matching a regular expression of `exclude_layers`)
    accumulates momentum m = momentum * m + g, and steps along the orthogonalized
    (Nesterov) momentum, from `ns_steps` Newton-Schulz iterations with coefficients
    (muon_a, muon_b, muon_c), scaled by sqrt(max(rows, cols)) * rms_rate; it decays by
    `weight_decay`. Every other variable takes AdamW steps (adam_beta_1, adam_beta_2,
    epsilon, rate times adam_lr_ratio) and decays by `adam_weight_decay`.

    >>> import tapeflow as tp
    >>> w = tp.Variable([[1.0, 0.0], [0.0, 1.0]], name="dense/kernel")
    >>> Muon(learning_rate=0.1, weight_decay=None).apply_gradients([(tp.tensor([[1.0, 0.0], [0.0, 1.0]]), w)])
    >>> [round(x, 3) for x in w.numpy().ravel().tolist()]
    [0.969, 0.0, 0.0, 0.969]
    """

    def __init__(
        self,
        learning_rate=0.001,
        adam_beta_1: float = 0.9,
        adam_beta_2: float = 0.999,
        adam_weight_decay: float | None = 0.004,
        epsilon: float = 1e-7,
        weight_decay: float | None = 0.004,
        name: str = "muon",
        exclude_layers=None,
        exclude_embeddings: bool = True,
        muon_a: float = 3.4445,
        muon_b: float = -4.7750,
        muon_c: float = 2.0315,
        adam_lr_ratio: float = 1,
        momentum: float = 0.95,
        ns_steps: int = 5,
        nesterov: bool = True,
        rms_rate: float | None = 0.2,
        **kwargs,
    ):
        super().__init__(learning_rate, name=name, **kwargs)  # weight decay is applied per kind of variable
        owner = "Muon"
        self.muon_weight_decay = None if weight_decay is None else _nonnegative(owner, "weight_decay", weight_decay)
        self.adam_weight_decay = (
            None if adam_weight_decay is None else _nonnegative(owner, "adam_weight_decay", adam_weight_decay)
        )
        self.adam_beta_1 = _nonnegative(owner, "adam_beta_1", adam_beta_1, upper=1.0, closed=False)
        self.adam_beta_2 = _nonnegative(owner, "adam_beta_2", adam_beta_2, upper=1.0, closed=False)
        self.epsilon = _nonnegative(owner, "epsilon", epsilon)
        self.exclude_layers = list(exclude_layers or [])
        self.exclude_embeddings = bool(exclude_embeddings)
        self.muon_a, self.muon_b, self.muon_c = float(muon_a), float(muon_b), float(muon_c)
        self.adam_lr_ratio = adam_lr_ratio
        self.momentum = _nonnegative(owner, "momentum", momentum)
        if isinstance(ns_steps, bool) or not isinstance(ns_steps, int) or ns_steps < 0:
            raise ValueError(f"{owner}: ns_steps must be an int >= 0, got {ns_steps!r}")
        self.ns_steps = ns_steps
        self.nesterov = bool(nesterov)
        self.rms_rate = rms_rate

    def uses_adamw(self, variable: Variable) -> bool:
        """Whether `variable` takes AdamW steps rather than Muon's."""
        if len(variable.shape) != 2:
            return True
        path = getattr(variable, "path", None) or variable.name
        if self.exclude_embeddings and "embedding" in path.lower():
            return True
        return any(re.search(pattern, path) for pattern in self.exclude_layers)

    def slot_initials(self, variable: Variable) -> dict[str, float]:
        return {"momentum": 0.0, "velocity": 0.0} if self.uses_adamw(variable) else {"momentum": 0.0}

    def update_step(self, gradient, variable: Variable, learning_rate) -> None:
        adamw = self.uses_adamw(variable)
        decay = self.adam_weight_decay if adamw else self.muon_weight_decay
        if decay and self.uses_weight_decay(variable):
            variable.assign(variable - variable * (learning_rate * decay))
        slots = self.slots(variable)
        if adamw:
            self._adamw_step(gradient, variable, learning_rate * self.adam_lr_ratio, slots)
        else:
            self._muon_step(gradient, variable, learning_rate, slots)

    def _adamw_step(self, gradient, variable, learning_rate, slots) -> None:
        step, b1, b2 = self._step, self.adam_beta_1, self.adam_beta_2
        root = sqrt(1.0 - b2**step) if isinstance(step, Tensor) else math.sqrt(1.0 - b2**step)
        alpha = learning_rate * root / (1.0 - b1**step)
        m = slots["momentum"] + (gradient - slots["momentum"]) * (1.0 - b1)
        v = slots["velocity"] + (square(gradient) - slots["velocity"]) * (1.0 - b2)
        slots["momentum"].assign(m)
        slots["velocity"].assign(v)
        variable.assign(variable - m * alpha / (sqrt(v) + self.epsilon))

    def _muon_step(self, gradient, variable, learning_rate, slots) -> None:
        m = slots["momentum"] + gradient + slots["momentum"] * (self.momentum - 1.0)
        slots["momentum"].assign(m)
        direction = gradient + m * self.momentum if self.nesterov else m
        update = self._orthogonalized(direction) * learning_rate
        if self.rms_rate is not None:
            update = update * (math.sqrt(max(variable.shape[0], variable.shape[1])) * self.rms_rate)
        variable.assign(variable - update)

    def _orthogonalized(self, x) -> Tensor:
        """Newton-Schulz iterations toward the nearest semi-orthogonal matrix."""
        tall = x.shape[-2] > x.shape[-1]
        if tall:
            x = transpose(x)
        x = x / (sqrt(reduce_sum(square(x))) + 1e-7)
        for _ in range(self.ns_steps):
            gram = matmul(x, transpose(x))
            x = x * self.muon_a + matmul(gram * self.muon_b + matmul(gram, gram) * self.muon_c, x)
        return transpose(x) if tall else x

    def get_config(self) -> dict:
        return {
            **super().get_config(),
            "weight_decay": self.muon_weight_decay,
            "adam_beta_1": self.adam_beta_1,
            "adam_beta_2": self.adam_beta_2,
            "epsilon": self.epsilon,
            "exclude_layers": self.exclude_layers,
            "muon_a": self.muon_a,
            "muon_b": self.muon_b,
            "muon_c": self.muon_c,
            "adam_lr_ratio": self.adam_lr_ratio,
            "momentum": self.momentum,
            "ns_steps": self.ns_steps,
            "nesterov": self.nesterov,
            "exclude_embeddings": self.exclude_embeddings,
            "adam_weight_decay": self.adam_weight_decay,
            "rms_rate": self.rms_rate,
        }
