"""The device API on the CPU: placement, explicit moves, and the mixed-device error."""

import numpy as np
import pytest

import tapeflow as tp
from tapeflow import _compat
from tapeflow.devices import DeviceMismatchError
from tapeflow.tensor import Tensor


def test_creation_takes_a_device_argument():
    for make in (
        lambda: tp.tensor([1.0, 2.0], device="cpu"),
        lambda: tp.zeros((2,), device="cpu:0"),
        lambda: tp.ones((2,), device=tp.Device("cpu", 0)),
        lambda: tp.full((2,), 3.0, device="cpu"),
        lambda: tp.arange(2, device="cpu"),
        lambda: tp.eye(2, device="cpu"),
    ):
        assert make().device == tp.Device("cpu", 0)


def test_unknown_or_absent_devices_are_named():
    with pytest.raises(ValueError, match="unknown device 'tpu:0'"):
        tp.zeros((2,), device="tpu:0")
    with pytest.raises(ValueError, match="gpu:7 is not available here"):
        tp.tensor([1.0], device="gpu:7")
    with pytest.raises(ValueError, match="gpu:7 is not available here"):
        tp.ones((1,)).to("gpu:7")


def test_ops_on_two_devices_raise_naming_both():
    here = tp.ones((2,))
    elsewhere = Tensor._wrap(np.ones(2, np.float32), tp.Device("xla", 0))
    with pytest.raises(DeviceMismatchError, match=r"add: inputs live on different devices, cpu:0 and xla:0"):
        tp.add(here, elsewhere)
    with pytest.raises(ValueError, match="matmul: .*xla:0 and cpu:0"):
        tp.matmul(Tensor._wrap(np.ones((1, 2), np.float32), tp.Device("xla", 0)), tp.ones((2, 1)))


def test_variables_refuse_values_from_another_device():
    v = tp.Variable(tp.zeros((2,)), name="w")
    elsewhere = Tensor._wrap(np.ones(2, np.float32), tp.Device("xla", 0))
    with pytest.raises(ValueError, match="'w' lives on cpu:0, the value on xla:0"):
        v.assign(elsewhere)
    np.testing.assert_array_equal(v.numpy(), [0.0, 0.0])


def test_a_tensor_given_a_device_moves_only_when_asked():
    t = tp.ones((2,))
    assert tp.tensor(t) is t and tp.tensor(t, device="cpu") is t


def test_a_torch_and_torch_xla_mismatch_is_named_with_its_fix():
    assert _compat.xla_version_problem("2.9.0+cpu", "2.9.0") is None
    problem = _compat.xla_version_problem("2.13.0", "2.9.0")
    assert "torch_xla 2.9.0 with torch 2.13.0" in problem and "pip install torch==2.9.0 torch-xla==2.9.0" in problem
    assert "torch None" in _compat.xla_version_problem(None, "2.9.0")


@pytest.mark.skipif(_compat.has_xla, reason="checks the message when torch_xla is absent")
def test_the_xla_backend_without_torch_xla_says_how_to_install_it():
    with pytest.raises(ImportError, match="needs the torch_xla package.*pip install torch==2.9.0"):
        _compat.require_xla()
