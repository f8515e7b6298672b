"""Keras layers that tapeflow does not offer, each defined so that using it says why:
the string layers (tapeflow has no string tensors) and the wrappers of other frameworks'
models.

>>> import tapeflow as tp
>>> tp.layers.StringLookup()
Traceback (most recent call last):
...
NotImplementedError: StringLookup is not available in tapeflow: tapeflow has no string tensors. ...
"""

from __future__ import annotations

from tapeflow.layers.base import Layer

_NO_STRINGS = (
    "tapeflow has no string tensors. Map strings to integer ids outside the model (for example with a Python "
    "dict) and use IntegerLookup, CategoryEncoding or Embedding on the ids"
)
_FOREIGN = "tapeflow runs its own layers only and cannot call into {framework} models; rewrite the model with tp.layers"


class _LeftOut(Layer):
    """A Keras layer name whose construction raises NotImplementedError with the reason."""

    reason = ""

    def __init__(self, *args, **kwargs):
        raise NotImplementedError(f"{type(self).__name__} is not available in tapeflow: {self.reason}.")


class TextVectorization(_LeftOut):
    """Not available: tapeflow has no string tensors.

    Args:
        args: any arguments: constructing the layer raises NotImplementedError.
        **kwargs: any keyword arguments, likewise.
    """

    reason = _NO_STRINGS


class StringLookup(_LeftOut):
    """Not available: tapeflow has no string tensors.

    Args:
        args: any arguments: constructing the layer raises NotImplementedError.
        **kwargs: any keyword arguments, likewise.
    """

    reason = _NO_STRINGS


class Hashing(_LeftOut):
    """Not available: tapeflow has no string tensors (Keras hashes strings and integers alike).

    Args:
        args: any arguments: constructing the layer raises NotImplementedError.
        **kwargs: any keyword arguments, likewise.
    """

    reason = _NO_STRINGS


class HashedCrossing(_LeftOut):
    """Not available: tapeflow has no string tensors.

    Args:
        args: any arguments: constructing the layer raises NotImplementedError.
        **kwargs: any keyword arguments, likewise.
    """

    reason = _NO_STRINGS


class TFSMLayer(_LeftOut):
    """Not available: it wraps a TensorFlow SavedModel.

    Args:
        args: any arguments: constructing the layer raises NotImplementedError.
        **kwargs: any keyword arguments, likewise.
    """

    reason = _FOREIGN.format(framework="TensorFlow SavedModel")


class JaxLayer(_LeftOut):
    """Not available: it wraps a JAX function.

    Args:
        args: any arguments: constructing the layer raises NotImplementedError.
        **kwargs: any keyword arguments, likewise.
    """

    reason = _FOREIGN.format(framework="JAX")


class FlaxLayer(_LeftOut):
    """Not available: it wraps a Flax module.

    Args:
        args: any arguments: constructing the layer raises NotImplementedError.
        **kwargs: any keyword arguments, likewise.
    """

    reason = _FOREIGN.format(framework="Flax")


class TorchModuleWrapper(_LeftOut):
    """Not available: it wraps a PyTorch module.

    Args:
        args: any arguments: constructing the layer raises NotImplementedError.
        **kwargs: any keyword arguments, likewise.
    """

    reason = _FOREIGN.format(framework="PyTorch")
