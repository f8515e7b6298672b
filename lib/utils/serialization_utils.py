"""Keras 3's `serialize_keras_object` / `deserialize_keras_object` over tapeflow's registry
of classes (`tapeflow.serialization`): configs name classes, never modules to import."""

from __future__ import annotations

import types

from tapeflow import initializers, layers, losses, metrics, models, optimizers, regularizers, serialization
from tapeflow.ops import nn
from tapeflow.optimizers import schedules

_NAMESPACES = (layers, models, losses, metrics, optimizers, schedules, initializers, regularizers)


def _builtin(name: str):
    for namespace in _NAMESPACES:
        found = serialization.builtin_class(vars(namespace), name)
        if found is not None:
            return found
    return None


def serialize_keras_object(obj):
    """A JSON-ready description of `obj`: plain values as they are, containers item by item,
    objects with `get_config` as {"class_name", "config"} dicts, functions by name.

    >>> import tapeflow as tp
    >>> serialize_keras_object(tp.layers.Dense(2, name="d"))["config"]["units"]
    2
    >>> serialize_keras_object([1, "a", None])
    [1, 'a', None]
    """
    if obj is None or isinstance(obj, bool | int | float | str):
        return obj
    if isinstance(obj, list | tuple):
        return [serialize_keras_object(item) for item in obj]
    if isinstance(obj, dict):
        return {key: serialize_keras_object(value) for key, value in obj.items()}
    if hasattr(obj, "get_config") and not isinstance(obj, type):
        return serialization.serialize(obj)
    if isinstance(obj, types.FunctionType | types.BuiltinFunctionType | type):
        registered = serialization.registered_name(obj)
        return {"class_name": "function", "config": obj.__name__, "registered_name": registered or obj.__name__}
    raise TypeError(f"serialize_keras_object: cannot describe {obj!r} ({type(obj).__name__}) as a config")


def deserialize_keras_object(config, custom_objects=None, safe_mode=True, **kwargs):
    """The object a `serialize_keras_object` description names: classes and functions
    come from `custom_objects`, `custom_object_scope`s, the registry, or tapeflow itself.

    >>> import tapeflow as tp
    >>> layer = deserialize_keras_object(serialize_keras_object(tp.layers.Dense(3, name="d")))
    >>> type(layer).__name__, layer.units
    ('Dense', 3)
    """
    if kwargs:
        raise TypeError(f"deserialize_keras_object: unexpected arguments {sorted(kwargs)}")
    if not safe_mode:
        raise ValueError("deserialize_keras_object: safe_mode=False is not supported; configs never run code")
    with serialization.custom_object_scope(custom_objects):
        return _deserialize(config)


def _deserialize(config):
    if config is None or isinstance(config, bool | int | float):
        return config
    if isinstance(config, list | tuple):
        return [_deserialize(item) for item in config]
    if isinstance(config, str):
        found = serialization.lookup(config, None, _builtin) or getattr(nn, config, None)
        if found is None:
            raise ValueError(f"deserialize_keras_object: unknown name {config!r}; pass it in custom_objects")
        return found
    if not isinstance(config, dict) or "class_name" not in config:
        raise ValueError(f"deserialize_keras_object: expected a {{'class_name', 'config'}} dict, got {config!r}")
    if config["class_name"] == "function":
        name = config.get("config")
        found = serialization.lookup(name, config.get("registered_name")) or getattr(nn, str(name), None)
        if found is None:
            raise ValueError(f"deserialize_keras_object: unknown function {name!r}; pass it in custom_objects")
        return found
    return serialization.deserialize(config, object, _builtin, "deserialize_keras_object")
