"""Every op's samples on gpu:0 with each NumPy reference the GPU backend falls back to run
on `StrictArray`s, which keep CuPy's rules (no implicit conversion to NumPy, no host array
mixed in): a reference that would fail on CuPy's arrays fails here, without a GPU."""

import numpy as np
import pytest
from strict_arrays import unwrap, wrap
from test_every_op import SAMPLES, _as_tuple, _params, _run

import tapeflow as tp
from tapeflow import _compat, devices
from tapeflow.ops import registry

pytestmark = pytest.mark.skipif(_compat.has_gpu, reason="a real GPU runs test_ops_on_devices instead")
HOST_ONLY = {  # ops the emulation cannot judge, and why
    "while_loop_grad": "runs its body's gradient graph, whose results come back unwrapped",
}


@pytest.fixture(autouse=True)
def _strict_gpu(monkeypatch):
    listed = devices.list_devices
    monkeypatch.setattr(devices, "list_devices", lambda: [*listed(), tp.Device("gpu", 0)])
    kernel = registry.OpDef.kernel

    def strict_kernel(op, family):
        fn = kernel(op, family)
        if family != "gpu" or fn is not op.reference:
            return fn
        return lambda *arrays, **attrs: unwrap(fn(*wrap(arrays), **attrs))

    monkeypatch.setattr(registry.OpDef, "kernel", strict_kernel)


@pytest.mark.parametrize(("op_name", "case"), _params("forward"))
def test_reference_runs_on_strict_arrays(op_name, case):
    if op_name in HOST_ONLY:
        pytest.skip(f"{op_name}: {HOST_ONLY[op_name]}")
    op = registry.get_op(op_name)
    with tp.device("gpu:0"):
        outputs = _run(op, case, [tp.tensor(a, device="gpu:0") for a in case.inputs])
    expected = _as_tuple(case.expected(*case.inputs))
    for out, want in zip(outputs, expected, strict=True):
        got = out.numpy()
        if np.asarray(want).dtype.kind == "f":
            np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5)
        else:
            np.testing.assert_array_equal(got, np.asarray(want).astype(got.dtype))
    assert set(SAMPLES) >= set(HOST_ONLY)
