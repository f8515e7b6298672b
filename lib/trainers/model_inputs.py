"""The inputs given to a functional model, lined up with its Inputs as Keras 3 lines them
up: a dict keyed by the Inputs' names for a model built on a list (or one Input), and an
array one rank short of an Input whose last dimension is 1 gets that axis (one rank more
with a last axis of 1 loses it).

>>> import tapeflow as tp
>>> a, b = tp.Input((2,), name="a"), tp.Input((1,), name="b")
>>> [t.shape for t in standardize_inputs([a, b], [a, b], {"b": tp.ones((4,)), "a": tp.ones((4, 2))}, "model")]
[(4, 2), (4, 1)]
"""

from __future__ import annotations

from tapeflow import tree
from tapeflow.ops.core import expand_dims, squeeze
from tapeflow.tensor import Tensor


def standardize_inputs(structure, model_inputs: list, inputs, owner: str) -> list:
    """The flat list of `inputs` in the order of `model_inputs` (the model's symbolic
    Inputs, `structure` as the model was built on them), ranks adjusted as Keras does."""
    if isinstance(inputs, dict) and not isinstance(structure, dict):
        names = [t.name for t in model_inputs]
        missing = [name for name in names if name not in inputs]
        if missing:
            raise ValueError(
                f"{owner}: the inputs are a dict with keys {sorted(map(str, inputs))}, but the model's Inputs are "
                f"named {names}; missing {missing}"
            )
        given = [inputs[name] for name in names]
    else:
        given = tree.flatten(inputs)
    if len(given) != len(model_inputs):
        raise ValueError(f"{owner}: expected {len(model_inputs)} inputs, got {len(given)}")
    return [_adjust_rank(value, spec) for value, spec in zip(given, model_inputs, strict=True)]


def _adjust_rank(value, spec):
    if not isinstance(value, Tensor):
        return value
    rank, expected = len(value.shape), len(spec.shape)
    if rank == expected - 1 and spec.shape[-1] == 1:
        return expand_dims(value, -1)
    if rank == expected + 1 and value.shape[-1] == 1:
        return squeeze(value, -1)
    return value
