"""Simulated slow workers: a fixed delay for some replicas, and/or one replica a step,
drawn at random, delayed (the straggler moves, as on a shared cluster).

The random draw depends only on (`seed`, step), so every replica agrees on who is slow
without talking, and a run can be repeated.

>>> s = Stragglers(fixed={1: 0.5}, random=2.0, seed=0)
>>> [round(sum(s.delay(r, step, parts=3) for r in range(3)), 1) for step in range(4)]
[2.5, 2.5, 2.5, 2.5]
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np


@dataclass(frozen=True)
class Stragglers:
    """Seconds of delay after each gradient: `fixed[replica]` every step, plus `random`
    for the one replica of `parts` drawn for the step."""

    fixed: dict[int, float] = field(default_factory=dict)
    random: float = 0.0
    seed: int = 0

    def delay(self, replica: int, step: int, parts: int) -> float:
        pause = self.fixed.get(replica, 0.0)
        if self.random and self.slowed(step, parts) == replica:
            pause += self.random
        return pause

    def slowed(self, step: int, parts: int) -> int:
        """The replica drawn to be slow at `step`."""
        return int(np.random.default_rng([self.seed, step]).integers(parts))

    def among(self, parts: int) -> Stragglers:
        """These stragglers on `parts` replicas (fixed delays of replicas beyond dropped)."""
        return Stragglers({r: s for r, s in self.fixed.items() if r < parts}, self.random, self.seed)


def checked_stragglers(fixed: dict | None, random: float, parts: int, owner: str) -> Stragglers:
    """`Stragglers` from user arguments, or a ValueError naming `owner` and the bad value."""
    fixed = fixed or {}
    if not isinstance(fixed, dict):
        raise TypeError(f"{owner}: straggler_delay must be a dict {{replica: seconds}}, got {fixed!r}")
    for replica, seconds in fixed.items():
        if not (isinstance(replica, int) and 0 <= replica < parts):
            raise ValueError(f"{owner}: straggler_delay keys must be replica numbers 0..{parts - 1}, got {replica!r}")
        _check_seconds(f"straggler_delay[{replica}]", seconds, owner)
    _check_seconds("random_straggler_delay", random, owner)
    return Stragglers({int(r): float(s) for r, s in fixed.items()}, float(random))


def _check_seconds(label: str, seconds, owner: str) -> None:
    if isinstance(seconds, bool) or not isinstance(seconds, int | float) or not seconds >= 0:
        raise ValueError(f"{owner}: {label} must be seconds >= 0, got {seconds!r}")
