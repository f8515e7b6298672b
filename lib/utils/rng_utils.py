"""One call that makes a run reproducible: `set_random_seed`, as Keras 3's."""

from __future__ import annotations

import random

import numpy as np

from tapeflow.ops import random as tp_random


def set_random_seed(seed: int) -> None:
    """Seed tapeflow's global stream (layers' initializers, dropout, shuffling), NumPy's
    global generator and Python's `random`, as Keras seeds its own, NumPy's and Python's.

    >>> import tapeflow as tp
    >>> set_random_seed(7); a = tp.random.normal((2,)).numpy(); b = np.random.rand()
    >>> set_random_seed(7); bool((a == tp.random.normal((2,)).numpy()).all()), b == np.random.rand()
    (True, True)
    """
    if not isinstance(seed, int) or isinstance(seed, bool):
        raise ValueError(f"set_random_seed: seed must be an integer, got {seed!r} ({type(seed).__name__})")
    tp_random.seed(seed)
    random.seed(seed)
    np.random.seed(seed)


def draw_seed() -> int:
    """A seed from tapeflow's global stream, for a function given `seed=None` (so that
    `set_random_seed` makes it repeatable, and no other library's random state moves)."""
    return int(tp_random.global_generator().numpy.integers(0, 1_000_000))
