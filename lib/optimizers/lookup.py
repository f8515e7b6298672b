"""`optimizers.get` and `optimizers.serialize`: optimizers by name and config."""

from __future__ import annotations

from tapeflow import serialization
from tapeflow.optimizers.adagrad import Adagrad
from tapeflow.optimizers.adam import Adam, AdamW
from tapeflow.optimizers.optimizer import Optimizer
from tapeflow.optimizers.rmsprop import RMSprop
from tapeflow.optimizers.sgd import SGD

_BY_NAME = {cls.__name__.lower(): cls for cls in (SGD, Adam, AdamW, RMSprop, Adagrad)}


def serialize(optimizer: Optimizer) -> dict:
    """{"class_name": ..., "config": ...}, which `get` turns back into an optimizer.

    >>> serialize(SGD(0.1))["class_name"]
    'SGD'
    """
    return serialization.serialize(optimizer)


def get(identifier) -> Optimizer:
    """An optimizer from an instance (returned as is), a name such as "adam"
    (default arguments), or a `serialize` dict.

    >>> get("rmsprop").get_config()["rho"]
    0.9
    """
    if isinstance(identifier, Optimizer):
        return identifier
    if isinstance(identifier, dict):
        return serialization.deserialize(
            identifier, Optimizer, lambda name: _BY_NAME.get(name.lower()), "optimizers.get"
        )
    if isinstance(identifier, str):
        cls = _BY_NAME.get(identifier.lower())
        if cls is None:
            raise ValueError(f"optimizers.get: unknown optimizer {identifier!r}; known names: {sorted(_BY_NAME)}")
        return cls()
    raise TypeError(f"optimizers.get: expected an Optimizer, a name or a config dict, got {type(identifier).__name__}")
