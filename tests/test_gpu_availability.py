"""Which GPUs are listed: only those CuPy can compile and run a kernel on, and otherwise a
reason that names what is missing. A stand-in CuPy module plays each machine."""

import subprocess
import sys
from types import SimpleNamespace

import numpy as np
import pytest
from strict_arrays import stand_in_gpu

import tapeflow as tp
from tapeflow import _compat, devices
from tapeflow.backends import cupy_backend  # loaded with this machine's real CuPy state, never a stand-in's

MISSING_HEADER = (
    "/site-packages/cupy/_core/include/cupy/carray.cuh(10): catastrophic error: "
    'cannot open source file "cuda_fp16.h"\n'
    "  #include <cuda_fp16.h>\n"
    "                        ^\n\n"
    '1 catastrophic error detected in the compilation of "/tmp/kern.cu".\n'
)


class CompileException(Exception):
    """Named as CuPy's compile error is."""


def fake_cupy(kernel_error=None, gpus=1, driver_error=None):
    """A CuPy module with `gpus` devices whose kernels raise `kernel_error` when launched
    (compiling happens on the first launch, as in CuPy); `launches` counts them."""
    launches = []

    def device_count():
        if driver_error is not None:
            raise driver_error
        return gpus

    def elementwise_kernel(in_params, out_params, operation, name):
        def launch(x):
            launches.append(name)
            if kernel_error is not None:
                raise kernel_error
            return x + 1

        return launch

    cuda = SimpleNamespace(runtime=SimpleNamespace(getDeviceCount=device_count))
    module = SimpleNamespace(cuda=cuda, ElementwiseKernel=elementwise_kernel, arange=np.arange, asnumpy=np.asarray)
    return module, launches


@pytest.fixture
def machine(monkeypatch):
    """Install a stand-in CuPy (or none) and forget the checked answer; undone after the test."""

    def install(cupy, import_error=None):
        monkeypatch.setattr(_compat, "cupy", cupy)
        monkeypatch.setattr(_compat, "has_cupy", cupy is not None)
        monkeypatch.setattr(_compat, "_cupy_import_error", import_error)
        monkeypatch.setattr(_compat, "_gpu_check", None)

    return install


def test_a_gpu_that_runs_the_check_kernel_is_listed_and_the_check_runs_once(machine):
    cupy, launches = fake_cupy(gpus=2)
    machine(cupy)
    assert [str(d) for d in tp.devices.list_devices()] == ["cpu:0", "gpu:0", "gpu:1"]
    assert devices.gpu_unavailable_reason() is None
    assert devices.parse_device("gpu:1") == tp.Device("gpu", 1)
    assert _compat.has_gpu is True
    assert len(launches) == 1


def test_missing_cuda_headers_hide_the_gpu_and_say_how_to_install_them(machine):
    machine(fake_cupy(CompileException(MISSING_HEADER))[0])
    assert all(d.family != "gpu" for d in devices.list_devices())
    assert _compat.has_gpu is False
    reason = devices.gpu_unavailable_reason()
    assert reason.startswith("CuPy cannot compile kernels: the CUDA headers are missing")
    assert "[ctk]" in reason and "CUDA toolkit" in reason
    assert 'cannot open source file "cuda_fp16.h"' in reason and "#include" not in reason


@pytest.mark.parametrize(
    "request_gpu",
    [
        lambda: tp.device("gpu:0").__enter__(),
        lambda: tp.tensor([1.0], device="gpu:0"),
        lambda: tp.zeros((2,), device="gpu"),
    ],
    ids=["device", "tensor", "zeros"],
)
def test_asking_for_an_unusable_gpu_raises_the_reason(machine, request_gpu):
    machine(fake_cupy(CompileException(MISSING_HEADER))[0])
    with pytest.raises(ValueError, match=r"gpu:0 is not available here: CuPy cannot compile kernels") as caught:
        request_gpu()
    assert "cuda_fp16.h" in str(caught.value) and "available: cpu:0" in str(caught.value)


def test_other_compile_load_and_launch_errors_are_named(machine):
    first_line = 'kern.cu(3): error: identifier "half" is undefined'
    machine(fake_cupy(CompileException(f"{first_line}\nmore"))[0])
    assert devices.gpu_unavailable_reason() == f"CuPy cannot compile kernels ({first_line})"
    machine(fake_cupy(RuntimeError("cudaErrorUnsupportedPtxVersion: the provided PTX was compiled with ..."))[0])
    reason = devices.gpu_unavailable_reason()
    assert reason.startswith("CuPy compiled a kernel but cannot run it (cudaErrorUnsupportedPtxVersion")
    assert "gpu-cuda12" in reason and "gpu-cuda13" in reason
    machine(fake_cupy(OSError("libnvrtc.so.13: cannot open shared object file: No such file or directory"))[0])
    reason = devices.gpu_unavailable_reason()
    assert reason.startswith("CuPy cannot load the CUDA libraries it compiles kernels with; install ")
    assert "[ctk]" in reason and "(libnvrtc.so.13: cannot open shared object file" in reason


def test_without_cupy_the_reason_names_both_extras_and_nvidia_smi(machine):
    error = ModuleNotFoundError("No module named 'cupy'", name="cupy")
    machine(None, error)
    assert devices.list_devices() == [devices.CPU]
    reason = devices.gpu_unavailable_reason()
    assert reason.startswith("CuPy is not installed: ")
    assert "tapeflow[gpu-cuda12]" in reason and "tapeflow[gpu-cuda13]" in reason and "nvidia-smi" in reason
    with pytest.raises(ValueError, match="CuPy is not installed"):
        tp.tensor([1.0], device="gpu:0")


def test_a_cupy_that_fails_to_import_or_finds_no_driver_or_gpu_says_so(machine):
    machine(None, ModuleNotFoundError("No module named 'fastrlock'", name="fastrlock"))
    assert devices.gpu_unavailable_reason().startswith("CuPy is installed but fails to import (No module named")
    machine(fake_cupy(driver_error=RuntimeError("cudaErrorInsufficientDriver: CUDA driver version is insufficient"))[0])
    assert devices.gpu_unavailable_reason().startswith("CuPy cannot reach a CUDA driver (cudaErrorInsufficientDriver")
    cupy, launches = fake_cupy(gpus=0)
    machine(cupy)
    assert devices.gpu_unavailable_reason().startswith("CuPy sees no CUDA GPU") and not launches


def test_require_cupy_names_both_extras(monkeypatch):
    monkeypatch.setattr(_compat, "has_cupy", False)
    with pytest.raises(ImportError, match=r"tapeflow\[gpu-cuda12\].*tapeflow\[gpu-cuda13\]"):
        _compat.require_cupy()


def test_the_stand_in_gpu_is_still_listed_where_the_gpu_is_unusable(machine, monkeypatch):
    machine(fake_cupy(CompileException(MISSING_HEADER))[0])
    monkeypatch.setattr(cupy_backend, "ON_GPU", False)  # the backend as it loads where has_gpu is false
    assert stand_in_gpu(monkeypatch) == "gpu:0"
    t = tp.tensor([1.0, -2.0], device="gpu:0")
    assert t.device == tp.Device("gpu", 0)
    np.testing.assert_array_equal(tp.nn.relu(t).to("cpu").numpy(), [1.0, 0.0])


def test_importing_tapeflow_checks_no_gpu():
    code = "import tapeflow, tapeflow._compat as c; print(c._gpu_check)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "None"
