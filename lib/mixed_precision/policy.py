"""Mixed precision, as Keras does it: variables in float32, computation in float16 or bfloat16.

A dtype policy names a layer's variable dtype and compute dtype. Under
"mixed_float16" or "mixed_bfloat16", a layer casts its floating inputs to the compute
dtype and reads its float32 trainable weights in it (the cast is an op, so gradients
come back to the float32 weights); losses compute in float32. float16's narrow range
needs loss scaling: `compile` wraps the optimizer in a `LossScaleOptimizer` under
"mixed_float16", and a custom loop uses one itself. bfloat16 has float32's range and
needs none. bfloat16 tensors are NumPy arrays of `ml_dtypes.bfloat16`.

>>> import tapeflow as tp
>>> tp.mixed_precision.set_global_policy("mixed_float16")
>>> layer = tp.layers.Dense(2)
>>> layer(tp.ones((1, 3))).dtype, layer.kernel.dtype
(tapeflow.float16, tapeflow.float32)
>>> tp.mixed_precision.set_global_policy("float32")
"""

from __future__ import annotations

import threading

from tapeflow import dtypes

__all__ = ["Policy", "set_global_policy", "global_policy"]

_MIXED = {"mixed_float16": "float16", "mixed_bfloat16": "bfloat16"}


class Policy:
    """A dtype policy: `variable_dtype` for weights, `compute_dtype` for the math.

    >>> p = Policy("mixed_bfloat16")
    >>> p.variable_dtype, p.compute_dtype
    (tapeflow.float32, tapeflow.bfloat16)
    """

    def __init__(self, name):
        if isinstance(name, Policy):
            name = name.name
        if isinstance(name, str) and name in _MIXED:
            compute = _MIXED[name]
            if compute == "bfloat16" and dtypes.bfloat16 is None:
                raise ImportError("mixed_bfloat16 needs the ml_dtypes package: pip install ml_dtypes")
            self.name, self.variable_dtype, self.compute_dtype = name, dtypes.float32, dtypes.as_dtype(compute)
            return
        try:
            dtype = dtypes.as_dtype(name)
        except TypeError:
            dtype = None
        if dtype is None or dtype.kind != "f":
            raise ValueError(
                f"Policy: expected 'mixed_float16', 'mixed_bfloat16' or a floating dtype name, got {name!r}"
            )
        self.name, self.variable_dtype, self.compute_dtype = dtype.name, dtype, dtype

    @property
    def is_mixed(self) -> bool:
        return self.compute_dtype is not self.variable_dtype

    def __eq__(self, other) -> bool:
        return isinstance(other, Policy) and other.name == self.name

    def __hash__(self) -> int:
        return hash(self.name)

    def __repr__(self) -> str:
        return f'<Policy "{self.name}">'


_STATE = threading.local()
_DEFAULT = Policy("float32")
_GLOBAL = [_DEFAULT]


def set_global_policy(policy) -> None:
    """The policy layers made from now on take ("mixed_float16", "mixed_bfloat16",
    "float32", or a Policy); None restores float32."""
    _GLOBAL[0] = _DEFAULT if policy is None else Policy(policy)


def global_policy() -> Policy:
    """The policy new layers take.

    >>> global_policy()
    <Policy "float32">
    """
    return _GLOBAL[0]
