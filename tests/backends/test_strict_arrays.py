"""The GPU stand-in refuses what CuPy 14 refuses, so that CI finds what a GPU would."""

import importlib.util
import json
import pathlib

import numpy as np
import pytest
import scipy.special
from strict_arrays import HOST_READS, NAMESPACE, StrictArray, StrictArrayModule, unwrap

xp = StrictArrayModule()


@pytest.fixture
def a():
    return xp.asarray(np.arange(6.0).reshape(2, 3))


def test_no_implicit_conversion_to_the_host(a):
    for convert in (np.asarray, np.array, lambda v: np.zeros(6).reshape(2, 3).__setitem__(Ellipsis, v), memoryview):
        with pytest.raises(TypeError):
            convert(a)
    assert not hasattr(a, "__array_interface__") and not hasattr(a, "__array_struct__")
    with pytest.raises(TypeError):
        range(xp.asarray(np.int64(3)))  # CuPy's arrays have no __index__


def test_ufuncs_take_device_arrays_and_scalars_only(a):
    assert unwrap(a * 2.0 + np.float32(1)).tolist() == [[1.0, 3.0, 5.0], [7.0, 9.0, 11.0]]
    for host in (np.asarray(2.0), np.ones(3), [1.0, 2.0, 3.0]):
        with pytest.raises(TypeError, match="multiply"):
            np.multiply(a, host)
    assert unwrap(scipy.special.expit(a)).shape == (2, 3)  # through cupyx.scipy.special
    with pytest.raises(TypeError, match="spacing"):
        np.spacing(a)


def test_ufunc_at_is_the_array_modules_for_what_cupy_scatters_only(a):
    xp.add.at(a, xp.asarray(np.array([0, 0])), 1.0)
    assert unwrap(a)[0].tolist() == [2.0, 3.0, 4.0]
    with pytest.raises(NotImplementedError, match="multiply.at"):
        xp.multiply.at(a, xp.asarray(np.array([0])), 2.0)
    with pytest.raises(TypeError, match="host arrays"):
        xp.add.at(a, np.array([0]), 1.0)
    with pytest.raises(TypeError, match="NotImplemented"):
        np.add.at(a, np.array([0]), 1.0)  # NumPy's ufunc.at does not reach a CuPy array


def test_maximum_at_on_float64_rounds_what_it_reaches_to_float32_as_cupys():
    """CuPy 14's atomicMax and atomicMin on doubles go through fmaxf and fminf."""
    out = xp.full((3,), -np.inf, dtype=np.float64)
    xp.maximum.at(out, xp.asarray(np.array([0, 0])), xp.asarray(np.array([0.1, -2.0])))
    assert unwrap(out).tolist() == [float(np.float32(0.1)), -np.inf, -np.inf]
    exact = xp.zeros((2,), dtype=np.float32)  # float32 targets stay exact
    xp.minimum.at(exact, xp.asarray(np.array([1])), xp.asarray(np.array([-0.1], np.float32)))
    assert unwrap(exact).tolist() == [0.0, float(np.float32(-0.1))]


def test_only_cupys_functions_and_attributes(a):
    assert unwrap(np.concatenate([a, a])).shape == (4, 3)
    with pytest.raises(TypeError, match="nanquantile"):
        np.nanquantile(a, 0.5)
    with pytest.raises(AttributeError):
        xp.nanquantile  # noqa: B018
    with pytest.raises(TypeError, match="host array"):
        np.concatenate([a, np.ones((1, 3))])
    with pytest.raises(AttributeError):
        a.flags.writeable  # noqa: B018
    assert a.flags.c_contiguous
    with pytest.raises(AttributeError):
        a.data  # noqa: B018


def test_results_are_device_arrays_and_host_reads_are_counted(a):
    total, element = np.sum(a), a[0, 1]
    assert isinstance(total, StrictArray) and total.shape == ()
    assert isinstance(element, StrictArray)
    before = sum(HOST_READS.values())
    assert float(total) == 15.0 and element.item() == 1.0 and xp.asnumpy(a).shape == (2, 3)
    assert sum(HOST_READS.values()) - before == 3


def test_host_data_enters_only_through_explicit_copies(a):
    assert isinstance(np.asarray(np.ones(2), like=a), StrictArray)
    with pytest.raises(TypeError, match="setitem"):
        a[0] = np.ones(3)
    with pytest.raises(TypeError):
        xp.ascontiguousarray(np.ones(3))


@pytest.mark.skipif(importlib.util.find_spec("cupy") is None, reason="CuPy is not installed here")
def test_the_name_lists_are_cupys_own():
    import cupy

    stored = json.loads((pathlib.Path(__file__).parent / "cupy_namespace.json").read_text())
    if cupy.__version__ != stored["cupy_version"]:
        pytest.skip(f"the lists were written from CuPy {stored['cupy_version']}, this is {cupy.__version__}")
    assert stored["module"] == sorted(n for n in dir(cupy) if not n.startswith("_"))
    assert NAMESPACE == stored
