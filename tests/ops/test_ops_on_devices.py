"""Every op's samples on every accelerator this process has, against the NumPy backend.

The cases are test_every_op's. On each non-CPU device the outputs must match the
NumPy float64 oracle and the gradients the CPU backend's, to the device's precision;
an op the backend lists as unsupported must raise UnsupportedOpError, never run on
the CPU. Where no GPU exists, "gpu:0" stands for the GPU backend run with NumPy in
place of CuPy, its device arrays StrictArrays that keep CuPy's rules (no implicit
conversion to NumPy, no host array mixed in), so that its array-module code and the
references it falls back to run every op here too.
"""

from __future__ import annotations

import numpy as np
import pytest
from strict_arrays import stand_in_gpu
from test_every_op import SAMPLES, _as_tuple, _float_inputs, _params, _run, _used, _weighted_sum

import tapeflow as tp
from tapeflow import _compat
from tapeflow.backends import UnsupportedOpError, backend
from tapeflow.devices import parse_device
from tapeflow.ops import registry

STAND_IN = None if _compat.has_gpu else tp.Device("gpu", 0)
DEVICES = [d for d in tp.list_devices() if d.family != "cpu"] + ([STAND_IN] if STAND_IN else [])


@pytest.fixture(autouse=True)
def _stand_in_gpu(monkeypatch):
    """List the stand-in GPU while a test runs; its arrays keep CuPy's rules (StrictArray)."""
    if STAND_IN is not None:
        stand_in_gpu(monkeypatch)


RTOL = {np.dtype(np.float64): 1e-7, np.dtype(np.float32): 1e-5, np.dtype(np.float16): 2e-3}


def _device_params(kind: str, need_floats: bool = False):
    out = []
    for dev in DEVICES:
        unsupported = backend(dev.family).UNSUPPORTED
        for param in _params(kind, need_floats=need_floats):
            op_name, case = param.values
            if op_name not in unsupported:
                out.append(pytest.param(str(dev), op_name, case, id=f"{dev}-{param.id}", marks=param.marks))
    return out


def _close(actual, expected, what: str) -> None:
    actual, expected = np.asarray(actual), np.asarray(expected)
    assert actual.shape == expected.shape, f"{what}: shape {actual.shape} != {expected.shape}"
    if expected.dtype.kind == "f":
        rtol = RTOL.get(actual.dtype, 1e-5)
        np.testing.assert_allclose(actual, expected, rtol=rtol, atol=rtol, err_msg=what)
    else:
        np.testing.assert_array_equal(actual, expected.astype(actual.dtype), err_msg=what)


# Decompositions whose vectors are defined up to sign: cuSOLVER and LAPACK may pick either.
SIGN_FREE = {"svd": (0, 2), "eigh": (1, None)}  # (output of column vectors, output of matching row vectors)


def _signs_fixed(op_name: str, outputs: tuple) -> tuple:
    """`outputs` with each vector of a sign-free decomposition turned so its largest entry is positive."""
    if op_name not in SIGN_FREE:
        return outputs
    columns, rows = SIGN_FREE[op_name]
    outs = [np.array(o, dtype=np.float64) for o in outputs]
    v = outs[columns]
    pick = np.take_along_axis(v, np.abs(v).argmax(axis=-2)[..., None, :], axis=-2)
    sign = np.where(pick < 0, -1.0, 1.0)
    outs[columns] = v * sign
    if rows is not None:
        outs[rows] = outs[rows] * np.swapaxes(sign, -1, -2)
    return tuple(outs)


def _on_a_real_gpu(device: str) -> bool:
    return device.startswith("gpu") and _compat.has_gpu


def _tape_gradient(op, case, device: str, cotangents, floats):
    tensors = [tp.tensor(a, device=device) for a in case.inputs]
    sources = [tensors[i] for i in floats]
    with tp.device(device), tp.GradientTape() as tape:
        tape.watch(sources)
        target = _weighted_sum(_used(case, _run(op, case, tensors)), cotangents)
    return tape.gradient(target, sources)


@pytest.mark.parametrize(("device", "op_name", "case"), _device_params("forward"))
def test_forward_on_device_matches_numpy(device, op_name, case):
    if op_name == "word2vec_sgns_train" and _on_a_real_gpu(device):
        pytest.skip("the fused GPU kernel draws other numbers: test_cuda_word2vec.py checks its statistics")
    op = registry.get_op(op_name)
    expected = _as_tuple(case.expected(*case.inputs))
    with tp.device(device):
        outputs = _run(op, case, [tp.tensor(a, device=device) for a in case.inputs])
    assert len(outputs) == len(expected)
    fixed = _signs_fixed(op_name, tuple(o.numpy() for o in outputs))
    expected_fixed = _signs_fixed(op_name, expected)
    for k, (o, e) in enumerate(zip(outputs, expected, strict=True)):
        assert o.device == parse_device(device)
        if op_name in SIGN_FREE:
            _close(fixed[k], expected_fixed[k], f"{op_name} output {k} on {device} (vectors' signs fixed)")
        else:
            _close(o.numpy(), e, f"{op_name} output {k} on {device}")
        cpu = _as_tuple(_run(op, case, [tp.tensor(a) for a in case.inputs]))[k]
        assert o.dtype == cpu.dtype, f"{op_name} output {k}: {o.dtype} on {device}, {cpu.dtype} on the CPU"


@pytest.mark.parametrize(("device", "op_name", "case"), _device_params("vjp", need_floats=True))
def test_gradients_on_device_match_the_cpu(device, op_name, case):
    op = registry.get_op(op_name)
    if not op.differentiable:
        return
    floats = _float_inputs(case)
    rng = np.random.default_rng(7)
    cotangents = [rng.standard_normal(np.shape(e)) for e in _used(case, _as_tuple(case.expected(*case.inputs)))]
    if op_name in SIGN_FREE and _on_a_real_gpu(device):  # a loss the vectors' signs do not change
        vectors = [i for i in SIGN_FREE[op_name] if i is not None]
        cotangents = [np.zeros_like(c) if i in vectors else c for i, c in enumerate(cotangents)]
    on_device = _tape_gradient(op, case, device, cotangents, floats)
    on_cpu = _tape_gradient(op, case, "cpu", cotangents, floats)
    for i, (g, c) in enumerate(zip(on_device, on_cpu, strict=True)):
        assert (g is None) == (c is None), f"{op_name}: gradient {i} connected on one device only"
        if g is not None:
            assert g.device == parse_device(device)
            _close(g.numpy(), c.numpy(), f"{op_name}[{case.name}] d/d input {floats[i]} on {device}")


@pytest.mark.parametrize("device", [str(d) for d in DEVICES])
def test_unsupported_ops_are_errors_not_cpu_runs(device):
    family = device.split(":")[0]
    unsupported = sorted(backend(family).UNSUPPORTED)
    assert set(unsupported) <= set(SAMPLES), "UNSUPPORTED names ops that do not exist"
    for name in unsupported:
        with pytest.raises(UnsupportedOpError, match=f"{name}: the {family} backend cannot run this op"):
            registry.get_op(name).kernel(family)
    if "categorical" in unsupported:
        with tp.device(device):
            logits = tp.tensor([[0.0, 1.0]])
            with pytest.raises(UnsupportedOpError, match="categorical"):
                tp.random.categorical(logits, 2)
