"""The names configs may use for user classes and functions, under Keras' names.

The registry itself is `tapeflow.serialization`, which layers use too; this module gives
it its place among the saving tools, as `keras.saving` does.

>>> import tapeflow as tp
>>> @register_keras_serializable(package="docs")
... class Scale(tp.layers.Layer):
...     pass
>>> registered_name(Scale)
'docs>Scale'
"""

from tapeflow.serialization import custom_object_scope, register_serializable, registered_name

__all__ = ["custom_object_scope", "register_keras_serializable", "register_serializable", "registered_name"]

register_keras_serializable = register_serializable  # Keras' name for it
