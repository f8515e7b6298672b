"""lib/_kernels/cuda/window.cu without a GPU, through the GPU backend: the kernels compiled for
the host (cuda_host's shims; the threads of a launch run one after another) and loaded with
ctypes, the backend's GPU branches run on NumPy arrays (strict_arrays.dispatch_on_host), and the
results compared with the ops' NumPy references in float64. Every array a kernel gets sits
between guard bands of NaN, so a read outside it shows in the result and a write outside it in
the bands. On a GPU, tests/ops/test_ops_on_devices.py runs the same ops through CuPy."""

import ctypes
import subprocess

import numpy as np
import pytest
from cuda_host import COMPILER, SHIMS
from strict_arrays import dispatch_on_host

from tapeflow._kernels import cuda
from tapeflow.backends import cupy_backend
from tapeflow.ops.registry import get_op

pytestmark = pytest.mark.skipif(COMPILER is None, reason="no C++ compiler (c++, g++ or clang++) on PATH")

# a launch: every block's threads in turn, each kernel called with the arrays and sizes it gets
RUNNER = r"""
#include <string>
#define TF_RUN(K, CALL)                                                   \
    if (kernel == #K) {                                                   \
        for (unsigned b = 0; b < grid; ++b)                               \
            for (unsigned t = 0; t < block; ++t) {                        \
                blockIdx.x = b;                                           \
                threadIdx.x = t;                                          \
                K CALL;                                                   \
            }                                                             \
        return 0;                                                         \
    }
#define TF_SIZES13 v[0], v[1], v[2], v[3], v[4], v[5], v[6], v[7], v[8], v[9], v[10], v[11], v[12]
#define TF_SIZES11 v[0], v[1], v[2], v[3], v[4], v[5], v[6], v[7], v[8], v[9], v[10]
#define TF_DTYPE(T, S)                                                                           \
    TF_RUN(im2col_##S, ((const T*)p[0], (T*)p[1], total, TF_SIZES13))                           \
    TF_RUN(col2im_##S, ((const T*)p[0], (T*)p[1], total, TF_SIZES13))                           \
    TF_RUN(max_pool_##S, ((const T*)p[0], (T*)p[1], total, TF_SIZES11))                         \
    TF_RUN(max_pool_grad_##S, ((const T*)p[0], (const T*)p[1], (T*)p[2], total, TF_SIZES11))     \
    TF_RUN(avg_pool_##S, ((const T*)p[0], (T*)p[1], total, TF_SIZES11))                         \
    TF_RUN(avg_pool_grad_##S, ((const T*)p[0], (T*)p[1], total, TF_SIZES11))

extern "C" int tf_launch(const char* name, unsigned grid, unsigned block, void** p, long long total, const int* v) {
    const std::string kernel(name);
    gridDim.x = grid;
    blockDim.x = block;
    TF_DTYPE(float, f32)
    TF_DTYPE(double, f64)
    return 1;
}
"""
GUARD = 64  # elements of NaN on each side of every array a kernel gets
_LIBRARY: list = []


def _library(tmp_path_factory):
    if not _LIBRARY:
        directory = tmp_path_factory.mktemp("window")
        source, library = directory / "window.cc", directory / "window.so"
        source.write_text("\n".join([SHIMS, cuda.SOURCES["window"].read_text(), RUNNER]))
        flags = ["-O1", "-std=c++17", "-shared", "-fPIC", "-ffp-contract=off", "-fno-fast-math", "-w"]
        done = subprocess.run([COMPILER, *flags, str(source), "-o", str(library)], capture_output=True, text=True)
        assert done.returncode == 0, done.stderr[-4000:]
        _LIBRARY.append(ctypes.CDLL(str(library)))
    return _LIBRARY[0]


class HostKernel:
    """A window.cu kernel as CuPy's RawKernel is called: (grid, block, args), the args arrays
    (C-contiguous, of the kernel's dtype), then one int64 count, then int32 sizes."""

    def __init__(self, library, name: str, launches: list):
        self.library, self.name, self.launches = library, name, launches

    def __call__(self, grid, block, args, shared_mem=0):
        arrays = [a for a in args if isinstance(a, np.ndarray)]
        rest = list(args[len(arrays) :])
        assert all(type(a) is np.int32 for a in rest[1:]) and type(rest[0]) is np.int64, [type(a) for a in rest]
        dtype = np.float32 if self.name.endswith("f32") else np.float64
        assert all(a.dtype == dtype and a.flags.c_contiguous for a in arrays)
        assert grid[0] * block[0] >= int(rest[0]) > (grid[0] - 1) * block[0]
        guarded = []
        for a in arrays:
            band = np.full(a.size + 2 * GUARD, np.nan, dtype)
            band[GUARD : GUARD + a.size] = a.reshape(-1)
            guarded.append(band)
        pointers = (ctypes.c_void_p * len(arrays))(*(b[GUARD:].ctypes.data for b in guarded))
        sizes = (ctypes.c_int * len(rest[1:]))(*(int(v) for v in rest[1:]))
        assert self.library.tf_launch(self.name.encode(), grid[0], block[0], pointers, int(rest[0]), sizes) == 0
        for a, band in zip(arrays, guarded, strict=True):
            assert np.isnan(band[:GUARD]).all() and np.isnan(band[GUARD + a.size :]).all(), f"{self.name} wrote outside"
        for a, band in zip(arrays[:-1], guarded[:-1], strict=True):
            np.testing.assert_array_equal(band[GUARD : GUARD + a.size], a.reshape(-1))  # inputs left as they were
        arrays[-1].reshape(-1)[...] = guarded[-1][GUARD : GUARD + arrays[-1].size]
        self.launches.append(self.name)


@pytest.fixture
def launches(monkeypatch, tmp_path_factory):
    """The names of the window.cu kernels launched, the GPU backend running them on the host."""
    library, names = _library(tmp_path_factory), []
    dispatch_on_host(cupy_backend, monkeypatch)

    def kernel(source, name):
        assert source == "window", source
        return HostKernel(library, name, names)

    monkeypatch.setattr(cuda, "kernel", kernel)
    return names


CONVOLUTIONS = [  # (x shape, filter shape, strides, padding, dilations)
    ((2, 7, 6, 3), (3, 2, 3, 4), (1, 1), "SAME", (1, 1)),
    ((2, 7, 6, 3), (3, 2, 3, 4), (2, 1), "VALID", (1, 1)),
    ((1, 9, 8, 2), (3, 3, 2, 5), (2, 3), "SAME", (1, 1)),
    ((2, 8, 7, 3), (2, 3, 3, 2), (1, 1), ((1, 2), (0, 3)), (1, 1)),
    ((1, 9, 9, 2), (3, 2, 2, 3), (1, 1), "SAME", (2, 3)),
    ((2, 5, 4, 6), (1, 1, 6, 3), (1, 1), "VALID", (1, 1)),  # a 1x1 filter: the input is the columns
    ((2, 5, 4, 6), (1, 1, 6, 3), (2, 2), "SAME", (1, 1)),
]


def _conv_case(rng, dtype, x_shape, w_shape, strides, padding, dilations):
    attrs = {"strides": strides, "padding": padding, "dilations": dilations}
    x, w = rng.standard_normal(x_shape), rng.standard_normal(w_shape)
    y = get_op("conv2d").reference(x, w, **attrs)
    dy = rng.standard_normal(y.shape)
    return x.astype(dtype), w.astype(dtype), y, dy, attrs


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("case", CONVOLUTIONS, ids=[f"{c[0]}*{c[1]}/{c[2]}/{c[3]}/{c[4]}" for c in CONVOLUTIONS])
def test_convolutions_and_their_gradients_match_the_references(launches, rng, dtype, case):
    x, w, want, dy64, attrs = _conv_case(rng, dtype, *case)
    dy, tol = dy64.astype(dtype), 2e-5 if dtype == np.float32 else 1e-12
    y = cupy_backend.conv2d(x, w, **attrs)
    assert y.dtype == dtype and y.shape == want.shape
    np.testing.assert_allclose(y, want, rtol=tol, atol=tol * np.abs(want).max())
    dw = cupy_backend.conv2d_filter_grad(x, dy, w.shape[:2], **attrs)
    want_dw = get_op("conv2d_filter_grad").reference(x.astype(np.float64), dy64, filter_size=w.shape[:2], **attrs)
    np.testing.assert_allclose(dw, want_dw, rtol=tol, atol=tol * np.abs(want_dw).max())
    dx = cupy_backend.conv2d_input_grad(dy, w, x.shape[1:3], **attrs)
    want_dx = get_op("conv2d_input_grad").reference(dy64, w.astype(np.float64), input_size=x.shape[1:3], **attrs)
    np.testing.assert_allclose(dx, want_dx, rtol=tol, atol=tol * np.abs(want_dx).max())
    suffix = "f32" if dtype == np.float32 else "f64"
    pointwise = w.shape[:2] == (1, 1) and attrs["strides"] == (1, 1)
    assert launches == ([] if pointwise else [f"im2col_{suffix}", f"im2col_{suffix}", f"col2im_{suffix}"])


def test_a_fused_convolution_adds_its_bias_and_relu_on_the_product(launches, rng, monkeypatch):
    """The bias and relu as the dense layers' generated kernel, written into the product."""
    epilogues = []

    def fake_elementwise(source):
        def kernel(y, b, out):
            epilogues.append(source.name)
            assert out is y
            np.maximum(y + b, 0, out=out)
            return out

        return kernel

    monkeypatch.setattr(cuda, "elementwise", fake_elementwise)
    x, w, want, _, attrs = _conv_case(rng, np.float64, (2, 6, 5, 3), (3, 3, 3, 4), (1, 1), "SAME", (1, 1))
    b = rng.standard_normal(4)
    y = cupy_backend.fused_conv2d(x, w, b, "relu", **attrs)
    np.testing.assert_allclose(y, np.maximum(want + b, 0), rtol=1e-12, atol=1e-12)
    assert launches == ["im2col_f64"] and len(epilogues) == 1


POOLS = [  # (x shape, ksize, strides, padding)
    ((2, 6, 8, 3), (2, 2), (2, 2), "VALID"),
    ((1, 7, 5, 2), (3, 3), (1, 1), "SAME"),
    ((2, 7, 6, 3), (3, 2), (2, 1), "SAME"),
    ((1, 9, 9, 4), (3, 3), (2, 2), "VALID"),  # overlapping windows: a cell can be the maximum of several
]


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("case", POOLS, ids=[f"{c[0]}/{c[1]}/{c[2]}/{c[3]}" for c in POOLS])
def test_max_pools_and_their_gradients_match_the_references(launches, rng, dtype, case):
    shape, ksize, strides, padding = case
    x = rng.integers(-3, 4, shape).astype(np.float64)  # many ties: the first maximum of a window takes its gradient
    x.reshape(-1)[rng.choice(x.size, 3, replace=False)] = [np.nan, -np.inf, np.inf]
    attrs = {"ksize": ksize, "strides": strides, "padding": padding}
    want = get_op("max_pool2d").reference(x, **attrs)
    dy = rng.standard_normal(want.shape)
    y = cupy_backend.max_pool2d(x.astype(dtype), **attrs)
    np.testing.assert_array_equal(y, want.astype(dtype))
    dx = cupy_backend.max_pool2d_grad(x.astype(dtype), dy.astype(dtype), **attrs)
    want_dx = get_op("max_pool2d_grad").reference(x, dy, **attrs)
    tol = 1e-6 if dtype == np.float32 else 1e-15
    np.testing.assert_allclose(dx, want_dx, rtol=tol, atol=tol)
    suffix = "f32" if dtype == np.float32 else "f64"
    assert launches == [f"max_pool_{suffix}", f"max_pool_grad_{suffix}"]


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("case", POOLS, ids=[f"{c[0]}/{c[1]}/{c[2]}/{c[3]}" for c in POOLS])
def test_average_pools_and_their_gradients_match_the_references(launches, rng, dtype, case):
    """Windows that reach into the padding divide by their cells inside the input."""
    shape, ksize, strides, padding = case
    x = rng.standard_normal(shape)
    attrs = {"ksize": ksize, "strides": strides, "padding": padding}
    want = get_op("avg_pool2d").reference(x, **attrs)
    dy = rng.standard_normal(want.shape)
    tol = 1e-6 if dtype == np.float32 else 1e-14
    y = cupy_backend.avg_pool2d(x.astype(dtype), **attrs)
    np.testing.assert_allclose(y, want, rtol=tol, atol=tol)
    dx = cupy_backend.avg_pool2d_grad(dy.astype(dtype), shape[1:3], **attrs)
    want_dx = get_op("avg_pool2d_grad").reference(dy, input_size=shape[1:3], **attrs)
    np.testing.assert_allclose(dx, want_dx, rtol=tol, atol=tol)
    suffix = "f32" if dtype == np.float32 else "f64"
    assert launches == [f"avg_pool_{suffix}", f"avg_pool_grad_{suffix}"]


def test_other_dtypes_and_mixed_dtypes_keep_the_array_operations(launches, rng):
    x, w = rng.standard_normal((1, 5, 5, 2)).astype(np.float16), rng.standard_normal((3, 3, 2, 2)).astype(np.float16)
    y = cupy_backend.conv2d(x, w, (1, 1), "SAME", (1, 1))
    want = get_op("conv2d").reference(x.astype(np.float64), w.astype(np.float64), (1, 1), "SAME", (1, 1))
    np.testing.assert_allclose(y, want, rtol=2e-2, atol=2e-2)
    pooled = cupy_backend.max_pool2d(x, (2, 2), (2, 2), "VALID")
    assert pooled.dtype == np.float16 and launches == []
    cupy_backend.conv2d(x.astype(np.float32), w.astype(np.float64), (1, 1), "SAME", (1, 1))
    assert launches == []


def test_a_gradient_that_does_not_fit_its_input_is_refused_before_a_launch(launches, rng):
    x, dy = rng.standard_normal((1, 6, 6, 2)), rng.standard_normal((1, 3, 4, 2))
    with pytest.raises(ValueError, match=r"max_pool2d_grad: gradient \(1, 3, 4, 2\) does not fit input \(1, 6, 6, 2\)"):
        cupy_backend.max_pool2d_grad(x, dy, (2, 2), (2, 2), "VALID")
    with pytest.raises(ValueError, match="conv2d_filter_grad: gradient"):
        cupy_backend.conv2d_filter_grad(x, dy, (3, 3), (1, 1), "VALID", (1, 1))
    with pytest.raises(ValueError, match="conv2d_transpose: gradient"):
        cupy_backend.conv2d_input_grad(dy, rng.standard_normal((3, 3, 2, 2)), (6, 6), (1, 1), "VALID", (1, 1))
    with pytest.raises(ValueError, match="avg_pool2d_grad: gradient"):
        cupy_backend.avg_pool2d_grad(dy, (6, 6), (2, 2), (2, 2), "VALID")
    assert launches == []
