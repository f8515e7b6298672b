"""Whole-model files, and the registry that lets configs name user classes.

>>> import tapeflow as tp
>>> @tp.saving.register_serializable(package="docs")
... class Scale(tp.layers.Layer):
...     def call(self, x):
...         return 2 * x
>>> tp.layers.deserialize(tp.layers.serialize(Scale(name="s"))).name
's'
"""

from __future__ import annotations

from tapeflow.serialization import custom_object_scope, register_serializable, registered_name

__all__ = ["custom_object_scope", "register_serializable", "registered_name"]
