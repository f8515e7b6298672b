"""Shapes with sizes known only when the graph runs (`DynamicDim`s, from `tp.ops.shape` of a
symbolic or traced tensor): a zero tensor of such a shape, built from the tensors the sizes
come from, so a functional model or a frozen graph reads the sizes from its inputs.

>>> import tapeflow as tp
>>> x = tp.Input((3,))
>>> zeros_of("zeros", (tp.ops.shape(x)[0], 2), "float32").shape
(None, 2)
"""

from __future__ import annotations

import numpy as np

from tapeflow import dtypes
from tapeflow.ops import shapes
from tapeflow.ops.core import expand_dims, sum, zeros_like
from tapeflow.ops.registry import wrap_host
from tapeflow.tensor import Tensor


def zeros_of(name: str, shape, dtype) -> Tensor:
    """Zeros of `shape`, whose sizes are ints or `DynamicDim`s, in `dtype`."""
    d = dtypes.as_dtype(dtype)
    dims = tuple(shape)
    static = shapes.as_dims(name, tuple(1 if isinstance(s, shapes.DynamicDim) else s for s in dims))
    out = wrap_host(np.zeros(static, dtype=d.np))
    for i, s in enumerate(dims):
        if isinstance(s, shapes.DynamicDim):
            source = zeros_like(s.tensor, dtype=d)
            others = tuple(a for a in range(source.ndim) if a != s.axis)
            line = sum(source, others) if others else source
            # trailing unit axes place the size at axis i; broadcasting supplies the leading ones
            for _ in range(len(dims) - i - 1):
                line = expand_dims(line, -1)
            out = out + line
    return out
