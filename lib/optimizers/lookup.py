"""`optimizers.get` and `optimizers.serialize`: optimizers by name and config."""

from __future__ import annotations

from tapeflow import serialization
from tapeflow.optimizers.adadelta import Adadelta
from tapeflow.optimizers.adafactor import Adafactor
from tapeflow.optimizers.adagrad import Adagrad
from tapeflow.optimizers.adam import Adam, AdamW
from tapeflow.optimizers.adamax import Adamax
from tapeflow.optimizers.ftrl import Ftrl
from tapeflow.optimizers.lamb import Lamb
from tapeflow.optimizers.lion import Lion
from tapeflow.optimizers.multi_optimizer import MultiOptimizer
from tapeflow.optimizers.muon import Muon
from tapeflow.optimizers.nadam import Nadam
from tapeflow.optimizers.optimizer import Optimizer
from tapeflow.optimizers.rmsprop import RMSprop
from tapeflow.optimizers.schedule_free_adamw import ScheduleFreeAdamW
from tapeflow.optimizers.sgd import SGD

_BY_NAME = {
    cls.__name__.lower(): cls
    for cls in (
        SGD,
        Adam,
        AdamW,
        RMSprop,
        Adagrad,
        Adadelta,
        Adafactor,
        Adamax,
        Ftrl,
        Lamb,
        Lion,
        Nadam,
        Muon,
        ScheduleFreeAdamW,
        MultiOptimizer,
    )
} | {"schedule_free_adamw": ScheduleFreeAdamW}


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


def deserialize(config, custom_objects: dict | None = None) -> Optimizer:
    """The optimizer a `serialize` dict (or a name) describes.

    >>> deserialize(serialize(Nadam(0.01))).get_config()["learning_rate"]
    0.01
    """
    if not isinstance(config, dict | str):
        raise TypeError(f"optimizers.deserialize: expected a config dict or a name, got {config!r}")
    with serialization.custom_object_scope(custom_objects):
        return get(config)
