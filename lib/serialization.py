"""Objects as {"class_name", "config"} dicts and back, with classes found only by name.

A class named in a config is looked up, in order, in the `custom_object_scope`s open in this
thread (`load_model(custom_objects=...)` opens one), among the classes and functions
registered with `register_serializable`, and among tapeflow's own classes of the expected
kind. Nothing else is tried: no module named by a config is ever imported, so reading a
config cannot run code the program did not already hold.

>>> @register_serializable(package="docs")
... class Twice:
...     def __init__(self, factor=2):
...         self.factor = factor
...     def get_config(self):
...         return {"factor": self.factor}
...     @classmethod
...     def from_config(cls, config):
...         return cls(**config)
>>> config = serialize(Twice(3))
>>> config
{'class_name': 'Twice', 'config': {'factor': 3}, 'registered_name': 'docs>Twice'}
>>> deserialize(config, object, lambda name: None, "example").factor
3
"""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Callable

_REGISTERED: dict[str, object] = {}  # "package>name" -> class or function
_NAMES: dict[object, str] = {}  # class or function -> "package>name"


class _Scopes(threading.local):
    def __init__(self):
        self.stack: list[dict] = []


_SCOPES = _Scopes()


def register_serializable(package: str = "Custom", name: str | None = None):
    """Register a class (or function) so that configs naming it can be read back; the
    decorator Keras calls `register_keras_serializable`. Its registered name is
    "package>name" (`name` defaults to the class's own name).

    >>> @register_serializable(package="docs")
    ... def doubled(x):
    ...     return 2 * x
    >>> registered_name(doubled)
    'docs>doubled'
    """
    if not isinstance(package, str) or ">" in package or (name is not None and not isinstance(name, str)):
        raise ValueError(f"register_serializable: package and name must be strings without '>', got {package!r}")

    def decorator(obj):
        if not callable(obj):
            raise TypeError(f"register_serializable: expected a class or a function, got {obj!r}")
        key = f"{package}>{name or obj.__name__}"
        known = _REGISTERED.get(key)
        if known is not None and known is not obj:
            raise ValueError(f"register_serializable: {key!r} is already registered to {known!r}")
        _REGISTERED[key] = obj
        _NAMES[obj] = key
        return obj

    return decorator


def registered_name(obj) -> str | None:
    """The "package>name" a class or function was registered under, or None."""
    try:
        return _NAMES.get(obj)
    except TypeError:  # unhashable
        return None


@contextlib.contextmanager
def custom_object_scope(objects: dict | None):
    """Within the block, configs may name the classes and functions of `objects`
    (by their key, which may be a plain class name or a "package>name").

    >>> class Local:
    ...     pass
    >>> with custom_object_scope({"Local": Local}):
    ...     lookup("Local") is Local
    True
    >>> lookup("Local") is None
    True
    """
    if objects is not None and not isinstance(objects, dict):
        raise TypeError(f"custom_objects must be a dict of name -> class or function, got {type(objects).__name__}")
    _SCOPES.stack.append(dict(objects or {}))
    try:
        yield
    finally:
        _SCOPES.stack.pop()


def lookup(class_name: str, registered: str | None = None, builtin: Callable | None = None):
    """The class or function a config names, or None: the scopes first, then the
    registered name, then tapeflow's own class (`builtin`), then the only registered class
    of that bare name."""
    keys = [k for k in (registered, class_name) if isinstance(k, str)]
    for scope in reversed(_SCOPES.stack):
        for key in keys:
            if key in scope:
                return scope[key]
    for key in keys:
        if key in _REGISTERED:
            return _REGISTERED[key]
    found = builtin(class_name) if builtin is not None else None
    if found is None:  # a bare class name: the one registered class of that name, if only one
        same_name = [obj for key, obj in _REGISTERED.items() if key.split(">", 1)[1] == class_name]
        found = same_name[0] if len(same_name) == 1 else None
    return found


def builtin_class(classes: dict, name: str):
    """classes[name] if it is one of tapeflow's own public classes (not a user subclass)."""
    cls = classes.get(name)
    if cls is None or name.startswith("_") or not cls.__module__.startswith("tapeflow."):
        return None
    return cls


def serialize(obj) -> dict:
    """{"class_name", "config"} (plus "registered_name" for a registered class) for an
    object with `get_config`."""
    config = {"class_name": type(obj).__name__, "config": obj.get_config()}
    name = registered_name(type(obj))
    if name is not None:
        config["registered_name"] = name
    return config


def deserialize(config, base: type, builtin: Callable, where: str):
    """The object a `serialize` dict describes, which must be an instance of `base`;
    `builtin(class_name)` gives tapeflow's own class of that kind (or None)."""
    if not isinstance(config, dict) or not isinstance(config.get("class_name"), str):
        raise ValueError(f"{where}: expected a {{'class_name': ..., 'config': ...}} dict, got {config!r}")
    inner = config.get("config", {})
    if not isinstance(inner, dict):
        raise ValueError(f"{where}: the 'config' of {config['class_name']!r} must be a dict, got {inner!r}")
    name = config["class_name"]
    cls = lookup(name, config.get("registered_name"), builtin)
    if cls is None:
        shown = config.get("registered_name") or name
        raise ValueError(
            f"{where}: unknown class {shown!r}: it is neither a tapeflow {base.__name__} nor registered. "
            f"Decorate the class with @tp.saving.register_serializable(), or pass custom_objects={{{name!r}: {name}}}"
        )
    if not (isinstance(cls, type) and issubclass(cls, base)):
        raise TypeError(f"{where}: {name!r} resolves to {cls!r}, which is not a {base.__name__}")
    return cls.from_config(dict(inner))
