"""Weight constraints, Keras style: `constraint(w) -> w'`, applied to a weight after each
optimizer update (a layer's `kernel_constraint=` and `bias_constraint=`).

>>> import tapeflow as tp
>>> tp.constraints.NonNeg()(tp.tensor([0.5, -1.0])).numpy().tolist()
[0.5, 0.0]
"""

from tapeflow.constraints.constraints import (
    Constraint,
    MaxNorm,
    MinMaxNorm,
    NonNeg,
    UnitNorm,
    deserialize,
    get,
    max_norm,
    min_max_norm,
    non_neg,
    serialize,
    unit_norm,
)

__all__ = [
    "Constraint",
    "MaxNorm",
    "MinMaxNorm",
    "NonNeg",
    "UnitNorm",
    "deserialize",
    "get",
    "max_norm",
    "min_max_norm",
    "non_neg",
    "serialize",
    "unit_norm",
]
