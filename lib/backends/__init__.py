"""Backends: one module per device family, each exposing kernels by op name.

>>> from tapeflow.backends import kernel_module
>>> kernel_module("cpu").__name__
'tapeflow.backends.numpy_backend'
"""

from __future__ import annotations

import importlib

_MODULES = {"cpu": "tapeflow.backends.numpy_backend"}


def kernel_module(family: str):
    """The backend module serving a device family."""
    try:
        return importlib.import_module(_MODULES[family])
    except KeyError:
        raise ValueError(f"no backend for device family {family!r}") from None
