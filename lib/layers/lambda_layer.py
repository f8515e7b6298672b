"""Lambda (a Python function as a layer) and Identity.

A Lambda's config names its function but never holds its code, so a saved Lambda is read
back only with the function itself: a registered function (`tp.saving.register_serializable`)
or one passed in `custom_objects`, or, for a Python `lambda`, with `safe_mode=False` and the
function given again (`function=` or `custom_objects={"<lambda>": fn}`). tapeflow never runs
code stored in a file.

>>> import tapeflow as tp
>>> tp.layers.Lambda(lambda x: 2 * x)(tp.tensor([1.0])).numpy().tolist()
[2.0]
"""

from __future__ import annotations

import inspect
import types

from tapeflow import serialization
from tapeflow.layers.base import Layer

_LAMBDA = "__lambda__"


def _is_python_lambda(fn) -> bool:
    return isinstance(fn, types.LambdaType) and fn.__name__ == "<lambda>"


def _function_config(fn):
    """A config entry naming `fn` (Keras's layout), without its code."""
    if not callable(fn):
        raise ValueError(f"Lambda: expected a callable, got {fn!r}")
    if _is_python_lambda(fn):
        return {"class_name": _LAMBDA, "config": {"name": "<lambda>", "module": getattr(fn, "__module__", None)}}
    name = getattr(fn, "__name__", type(fn).__name__)
    return {
        "module": getattr(fn, "__module__", None),
        "class_name": "function",
        "config": name,
        "registered_name": serialization.registered_name(fn) or name,
    }


def _unsafe_error(what: str) -> ValueError:
    return ValueError(
        f"Lambda.from_config: the config's {what} is a Python lambda, whose code is not saved: tapeflow never runs "
        "code from a file. If you trust the source, pass safe_mode=False together with the function itself "
        "(function=..., or custom_objects={'<lambda>': fn}); better, give the layer a named function registered "
        "with tp.saving.register_serializable()."
    )


def _resolve(entry, what: str, safe_mode, custom_objects):
    """The function a config entry names: found among custom objects and registered functions."""
    if entry is None or callable(entry):
        return entry
    if isinstance(entry, str):
        entry = {"class_name": "function", "config": entry, "registered_name": entry}
    if not isinstance(entry, dict):
        if what == "output_shape" and isinstance(entry, list | tuple):
            return tuple(entry)
        raise ValueError(f"Lambda.from_config: cannot read the {what} entry {entry!r}")
    with serialization.custom_object_scope(custom_objects):
        if entry.get("class_name") == _LAMBDA:
            if safe_mode is not False:
                raise _unsafe_error(what)
            found = serialization.lookup("<lambda>")
            if found is None:
                raise _unsafe_error(what)
            return found
        name = entry.get("config")
        found = serialization.lookup(name, entry.get("registered_name"))
    if found is None or not callable(found):
        raise ValueError(
            f"Lambda.from_config: unknown function {entry.get('registered_name') or name!r} for the {what}: "
            f"register it with tp.saving.register_serializable() or pass custom_objects={{{name!r}: {name}}}"
        )
    return found


class Lambda(Layer):
    """Wrap a function of tapeflow ops as a layer: `function(inputs, **arguments)` (also given
    `mask` and `training` when its signature takes them).

    Args:
        function: the function (a named, registered function can be saved and loaded back).
        output_shape: the output shape without the batch axis, or a function of the input
            shape; None infers it by tracing `function`.
        mask: None, or a function `(inputs, mask) -> output mask`.
        arguments: extra keyword arguments for `function` (plain values).
        **kwargs: the base layer's arguments (`name`, `trainable`, `dtype`, `input_shape`).

    >>> import tapeflow as tp
    >>> layer = tp.layers.Lambda(tp.square, output_shape=(2,))
    >>> layer.compute_output_shape((None, 2)), layer(tp.tensor([[3.0, 1.0]])).numpy().tolist()
    ((None, 2), [[9.0, 1.0]])
    """

    def __init__(self, function, output_shape=None, mask=None, arguments=None, **kwargs):
        super().__init__(**kwargs)
        if not callable(function):
            raise ValueError(f"{self.name}: function must be callable, got {function!r}")
        if mask is not None and not callable(mask):
            raise NotImplementedError(f"{self.name}: mask must be None or a function of (inputs, mask), got {mask!r}")
        self.function = function
        self.arguments = dict(arguments or {})
        self.mask = mask
        self.supports_masking = mask is not None
        self._output_shape = tuple(output_shape) if isinstance(output_shape, list) else output_shape
        try:
            params = inspect.signature(function).parameters
        except (TypeError, ValueError):
            params = {}
        self._takes_mask = "mask" in params
        self._takes_training = "training" in params

    def call(self, inputs, mask=None, training=None):
        kwargs = dict(self.arguments)
        if self._takes_mask:
            kwargs["mask"] = mask
        if self._takes_training:
            kwargs["training"] = training
        return self.function(inputs, **kwargs)

    def compute_mask(self, inputs, mask=None):
        return self.mask(inputs, mask) if callable(self.mask) else None

    def compute_output_shape(self, input_shape):
        if self._output_shape is None:
            return super().compute_output_shape(input_shape)
        if callable(self._output_shape):
            return self._output_shape(input_shape)
        first = input_shape[0] if isinstance(input_shape, list) else input_shape
        return (first[0], *self._output_shape)

    def get_config(self):
        config = {**super().get_config(), "function": _function_config(self.function)}
        if self._output_shape is not None:
            shape = self._output_shape
            config["output_shape"] = _function_config(shape) if callable(shape) else list(shape)
        if self.mask is not None:
            config["mask"] = _function_config(self.mask)
        config["arguments"] = self.arguments
        return config

    @classmethod
    def from_config(cls, config: dict, custom_objects=None, safe_mode=None, function=None):
        """The layer a config describes. The function comes from `function=`, or by name from
        `custom_objects` and registered functions; a Python lambda's config is refused unless
        `safe_mode=False` (and even then its code is never read from the config)."""
        config = dict(config)
        entry = config.pop("function")
        if function is None:
            function = _resolve(entry, "function", safe_mode, custom_objects)
        for key in ("output_shape", "mask"):
            if key in config:
                config[key] = _resolve(config[key], key, safe_mode, custom_objects)
        return cls(function, **config)


class Identity(Layer):
    """Return the inputs unchanged (a placeholder layer).

    Args:
        **kwargs: the base layer's arguments (`name`, `trainable`, `dtype`, `input_shape`).

    >>> import tapeflow as tp
    >>> tp.layers.Identity()(tp.tensor([1.0, 2.0])).numpy().tolist()
    [1.0, 2.0]
    """

    supports_masking = True

    def __init__(self, **kwargs):
        super().__init__(**kwargs)

    def call(self, inputs):
        return inputs

    def compute_output_shape(self, input_shape):
        return input_shape

    def get_config(self):
        return super().get_config()
