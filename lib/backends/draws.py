"""Random numbers on the host. Uniform draws in [0, 1) for every device's random ops: one 64-bit
key taken from the generator's stream, then the compiled counter-based kernel
(`_kernels.uniform`), so that a seed gives the same numbers on the CPU, on XLA and on a GPU.
And the row order a Fisher-Yates shuffle makes from given draws (`swap_order`).

>>> import numpy as np
>>> a = uniform01(np.random.default_rng(0), (2, 3), np.float32)
>>> b = uniform01(np.random.default_rng(0), (2, 3), np.float32)
>>> a.shape, a.dtype.name, bool((a == b).all()), bool(((a >= 0) & (a < 1)).all())
((2, 3), 'float32', True, True)
"""

from __future__ import annotations

import math

import numpy as np

from tapeflow import _kernels


def uniform01(rng: np.random.Generator, shape, dtype) -> np.ndarray:
    """A `shape` array of float32 or float64 numbers uniform in [0, 1); `rng` moves on by one draw."""
    key = int(rng.bit_generator.random_raw())
    return _kernels.uniform(key, math.prod(shape), dtype).reshape(shape)


def swap_order(draws: np.ndarray) -> np.ndarray:
    """The order of rows 0 .. n - 1 after swapping, for last = n - 1 down to 0, the row at
    `draws[n - 1 - last]` (in [0, last]) with the row at `last`, read back to front.

    >>> swap_order(np.array([0, 0, 0])).tolist()
    [0, 2, 1]
    """
    return _kernels.swap_order(np.ascontiguousarray(draws, dtype=np.int64))
