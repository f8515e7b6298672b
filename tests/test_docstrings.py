"""Every docstring example in the package runs and prints what it shows."""

import doctest
import importlib
import pkgutil

import pytest

import tapeflow
from tapeflow import _compat

MODULES = sorted(info.name for info in pkgutil.walk_packages(tapeflow.__path__, "tapeflow."))
NEEDS = {"tapeflow.backends.xla_backend": ("torch_xla", _compat.has_xla)}  # modules of an optional extra


@pytest.mark.parametrize("name", MODULES)
def test_docstring_examples(name):
    package, available = NEEDS.get(name, ("", True))
    if not available:
        pytest.skip(f"{name} needs {package}")
    module = importlib.import_module(name)
    result = doctest.testmod(module, optionflags=doctest.ELLIPSIS | doctest.NORMALIZE_WHITESPACE)
    assert result.failed == 0, f"{result.failed} docstring example(s) failed in {name}"
