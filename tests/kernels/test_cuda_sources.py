"""The GPU backend's CUDA C, checked without a GPU: the generated ElementwiseKernel bodies and
the RawKernel files are compiled for the host with the system C++ compiler behind a few shims
(`__device__`, the bit-pattern intrinsics, threads and a barrier standing in for a block) and
run against the NumPy references. On the stand-in GPU the backend runs the references."""

import dataclasses
import functools
import shutil
import subprocess
import types

import numpy as np
import pytest
from strict_arrays import HOST_READS, dispatch_on_host, stand_in_gpu

import tapeflow as tp
from tapeflow._kernels import cuda
from tapeflow._kernels.cuda import elementwise_source
from tapeflow._kernels.fusion_opcodes import ARITY, PRIMITIVES
from tapeflow.backends import cupy_backend
from tapeflow.ops.registry import get_op

COMPILER = next((shutil.which(c) for c in ("c++", "g++", "clang++") if shutil.which(c)), None)
needs_compiler = pytest.mark.skipif(COMPILER is None, reason="no C++ compiler (c++, g++ or clang++) on PATH")
needs_gpu = pytest.mark.skipif(not cupy_backend.ON_GPU, reason="needs CuPy and a CUDA GPU")
NPTYPES = {"float32": np.float32, "float64": np.float64}
TRANSCENDENTAL = frozenset({"exp", "log", "tanh", "sigmoid"})
EXACT = tuple(op for op in PRIMITIVES if op not in TRANSCENDENTAL)
SPECIAL = [np.nan, np.inf, -np.inf, 0.0, -0.0, 1.0, -1.0, 0.5, -2.0, 1e-3, 3e4]
CONSTANTS = [0.1, -0.0, 1.5, 2, float("inf"), float("-inf"), float("nan"), 1e-30, 3.0e38, -7.25]

SHIMS = r"""
#include <cmath>
#include <cstdio>
#include <cstring>
#include <vector>
#define __device__
#define __forceinline__ inline
using std::exp; using std::log; using std::tanh; using std::sqrt; using std::fabs; using std::pow;
static inline float __int_as_float(int bits) { float x; std::memcpy(&x, &bits, sizeof x); return x; }
static inline double __longlong_as_double(long long bits) { double x; std::memcpy(&x, &bits, sizeof x); return x; }
"""
MAIN = r"""
int main(int argc, char** argv) {
    std::FILE* f = std::fopen(argv[1], "rb");
    std::vector<char> in(IN_BYTES + 16), out(OUT_BYTES + 16);
    if (!f || std::fread(in.data(), 1, IN_BYTES, f) != IN_BYTES) return 2;
    std::fclose(f);
    char* tf_in = in.data();
    char* tf_out = out.data();
CALLS
    f = std::fopen(argv[2], "wb");
    if (!f || std::fwrite(out.data(), 1, OUT_BYTES, f) != OUT_BYTES) return 3;
    std::fclose(f);
    return 0;
}
"""


def _compile(text: str, directory, name: str) -> str:
    source, binary = directory / f"{name}.cc", directory / name
    source.write_text(text)
    flags = ["-O0", "-std=c++17", "-ffp-contract=off", "-fno-fast-math", "-pthread", "-w"]
    done = subprocess.run([COMPILER, *flags, str(source), "-o", str(binary)], capture_output=True, text=True)
    assert done.returncode == 0, f"host compile failed:\n{done.stderr[-4000:]}"
    return str(binary)


def _run(binary: str, directory, data: bytes, out_bytes: int) -> bytes:
    (directory / "in.bin").write_bytes(data)
    done = subprocess.run([binary, str(directory / "in.bin"), str(directory / "out.bin")], capture_output=True)
    assert done.returncode == 0, done.stderr
    out = (directory / "out.bin").read_bytes()
    assert len(out) == out_bytes
    return out


class Harness:
    """Generated ElementwiseKernels as host functions, each run over `n` elements of inputs
    already broadcast (CuPy's part); raw inputs are one element each."""

    def __init__(self, kernels: list, directory):
        """`kernels`: (KernelSource, n) pairs, compiled into one program."""
        self.kernels, self.directory = kernels, directory
        preambles = list(dict.fromkeys(source.preamble for source, _ in kernels))
        functions, calls = [], []
        in_offset = out_offset = 0
        for k, (source, n) in enumerate(kernels):
            lines, args = [f"static void kernel_{k}(long tf_n, char** tf_args) {{"], []
            for a, (dtype, name, raw) in enumerate(source.inputs):
                t = elementwise_source.SCALAR_CTYPES[dtype]
                if raw:
                    lines.append(f"    const {t}* {name} = reinterpret_cast<const {t}*>(tf_args[{a}]);")
                args.append(f"tf_in + {in_offset}")
                in_offset += _padded((1 if raw else n) * np.dtype(dtype).itemsize)
            lines.append(source.loop_prep)
            lines.append("    for (long tf_i = 0; tf_i < tf_n; ++tf_i) {")
            for a, (dtype, name, raw) in enumerate(source.inputs):
                t = elementwise_source.SCALAR_CTYPES[dtype]
                if not raw:
                    lines.append(f"        const {t} {name} = reinterpret_cast<const {t}*>(tf_args[{a}])[tf_i];")
            for b, (dtype, name, _) in enumerate(source.outputs):
                t = elementwise_source.CTYPES[dtype]
                index = len(source.inputs) + b
                lines.append(f"        {t}& {name} = reinterpret_cast<{t}*>(tf_args[{index}])[tf_i];")
                args.append(f"tf_out + {out_offset}")
                out_offset += _padded(n * np.dtype(dtype).itemsize)
            lines += ["        {", source.operation, "        }", "    }", "}"]
            functions.append("\n".join(lines))
            calls.append(f"    {{ char* a[] = {{{', '.join(args)}}}; kernel_{k}({n}, a); }}")
        self.in_bytes, self.out_bytes = in_offset, out_offset
        main = MAIN.replace("IN_BYTES", str(in_offset)).replace("OUT_BYTES", str(out_offset))
        text = "\n".join([SHIMS, *preambles, *functions, main.replace("CALLS", "\n".join(calls))])
        self.binary = _compile(text, directory, "elementwise")

    def __call__(self, inputs: list) -> list:
        """`inputs[k]`: kernel k's input arrays in order; returns each kernel's outputs."""
        chunks = []
        for (source, n), arrays in zip(self.kernels, inputs, strict=True):
            for (dtype, _, raw), array in zip(source.inputs, arrays, strict=True):
                flat = np.ascontiguousarray(array, dtype=dtype).reshape(-1)
                assert flat.size == (1 if raw else n)
                chunks.append(flat.tobytes().ljust(_padded(flat.nbytes), b"\0"))
        out = _run(self.binary, self.directory, b"".join(chunks), self.out_bytes)
        results, offset = [], 0
        for source, n in self.kernels:
            arrays = []
            for dtype, _, _ in source.outputs:
                arrays.append(np.frombuffer(out, dtype=dtype, count=n, offset=offset).copy())
                offset += _padded(n * np.dtype(dtype).itemsize)
            results.append(arrays)
        return results


def _padded(nbytes: int) -> int:
    return (nbytes + 15) // 16 * 16


def assert_same_values(got, want, label=""):
    """Equal element for element, NaN matching NaN and 0.0 not matching -0.0."""
    assert got.dtype == want.dtype and got.shape == want.shape
    np.testing.assert_array_equal(got, want, err_msg=label)
    zeros = want == 0
    np.testing.assert_array_equal(np.signbit(got[zeros]), np.signbit(want[zeros]), err_msg=f"signed zeros {label}")


# ------------------------------------------------------------ fused elementwise programs
def random_program(rng, n_inputs: int, length: int, ops) -> tuple:
    program = [("input", i) for i in range(n_inputs)]
    for _ in range(length):
        k = len(program)
        if rng.random() < 0.12:
            program.append(("const", CONSTANTS[rng.integers(len(CONSTANTS))]))
            continue
        op = ops[rng.integers(len(ops))]
        recent = max(0, k - 4)  # mostly the registers just made, so that the chains grow deep
        args = tuple(
            int(rng.integers(recent, k) if rng.random() < 0.7 else rng.integers(0, k)) for _ in range(ARITY[op])
        )
        program.append((op, *args))
    return tuple(program)


def random_inputs(rng, n_inputs: int, n: int, dtype) -> list:
    arrays = []
    for _ in range(n_inputs):
        x = rng.standard_normal(n) * np.exp(rng.uniform(-3, 3, n))
        special = rng.random(n) < 0.25
        x[special] = rng.choice(SPECIAL, int(special.sum()))
        arrays.append(x.astype(dtype))
    return arrays


def _reference(program, inputs):
    with np.errstate(all="ignore"):
        return get_op("fused_elementwise").reference(*inputs, program=program)


def _cases(rng, dtype: str, count: int, ops, n: int = 64):
    cases = []
    for _ in range(count):
        n_inputs = int(rng.integers(1, 4))
        program = random_program(rng, n_inputs, int(rng.integers(1, 9)), ops)
        cases.append((program, random_inputs(rng, n_inputs, n, NPTYPES[dtype])))
    return cases


def with_registers(source):
    """`source` that also writes every register out, as `tf_reg<k>`."""
    count = source.operation.count("const ")
    outputs = tuple((source.outputs[0][0], f"tf_reg{k}", False) for k in range(count))
    operation = source.operation + "\n" + "\n".join(f"tf_reg{k} = r{k};" for k in range(count))
    return dataclasses.replace(source, outputs=source.outputs + outputs, operation=operation)


def fused_cases(dtype: str) -> list:
    """Every primitive on every pair of special values, then random programs: (program, inputs)."""
    rng = np.random.default_rng(7 if dtype == "float32" else 8)
    singles = [
        (("input", 0), (op, 0)) if ARITY[op] == 1 else (("input", 0), ("input", 1), (op, 0, 1)) for op in PRIMITIVES
    ]
    grid = np.array(SPECIAL + list(rng.standard_normal(21) * 10))
    pairs = [np.repeat(grid, grid.size).astype(dtype), np.tile(grid, grid.size).astype(dtype)]
    cases = [(p, pairs[: ARITY[p[-1][0]]]) for p in singles]
    return cases + _cases(rng, dtype, 80, EXACT) + _cases(rng, dtype, 60, PRIMITIVES)


def check_fused_results(cases, results, dtype: str, flushes: bool = False) -> None:
    """The exactly rounded primitives agree with the reference bit for bit (NaN, inf and signed
    zeros included; with `flushes`, up to float32 subnormals flushed to zero, as CuPy compiles);
    exp, log, tanh and sigmoid to a few units in the last place, each instruction checked on
    the registers the kernel computed, so that no rounding difference is amplified downstream."""
    rtol, tiny = 8 * np.finfo(dtype).eps, np.finfo(dtype).tiny

    def same(got, want, label):
        if flushes and dtype == "float32":
            np.testing.assert_allclose(got, want, rtol=0, atol=tiny, equal_nan=True, err_msg=label)
        else:
            assert_same_values(got, want, label)

    for (program, inputs), (got, *registers) in zip(cases, results, strict=True):
        assert_same_values(registers[-1], got)
        if not any(ins[0] in TRANSCENDENTAL for ins in program):
            same(got, _reference(program, inputs), str(program))
            continue
        for k, ins in enumerate(program):
            if ins[0] in ("input", "const"):
                want = _reference(program[: k + 1], inputs)
            else:
                with np.errstate(all="ignore"):
                    want = get_op(ins[0]).reference(*(registers[a] for a in ins[1:])).astype(dtype)
            label = f"register {k} of {program}"
            if ins[0] in TRANSCENDENTAL:
                np.testing.assert_allclose(registers[k], want, rtol=rtol, atol=tiny, equal_nan=True, err_msg=label)
            else:
                same(registers[k], want, label)


@needs_compiler
@pytest.mark.parametrize("dtype", ["float32", "float64"])
def test_generated_fused_programs_match_the_reference(dtype, tmp_path):
    cases = fused_cases(dtype)
    kernels = [(with_registers(elementwise_source.fused_elementwise(p, len(xs), dtype)), xs[0].size) for p, xs in cases]
    check_fused_results(cases, Harness(kernels, tmp_path)([xs for _, xs in cases]), dtype)


@needs_compiler
@pytest.mark.parametrize("dtype", ["float32", "float64"])
def test_relu_grad_and_the_bias_kernels_match_their_references(dtype, tmp_path):
    """relu_grad's kernel and fused_matmul's bias-and-activation kernels (fused programs), on
    special values: NaN, infinities and signed zeros in both operands."""
    nptype = NPTYPES[dtype]
    special = np.array(SPECIAL, nptype)
    g, y = np.repeat(special, special.size), np.tile(special, special.size)
    bias = {a: cupy_backend._bias_source(dtype, a) for a in ("linear", "relu")}
    kernels = [(elementwise_source.relu_grad(dtype), g.size), *((source, g.size) for source in bias.values())]
    got = Harness(kernels, tmp_path)([[g, y], [y, g], [y, g]])
    assert_same_values(got[0][0], get_op("relu_grad").reference(g, y))
    with np.errstate(invalid="ignore"):  # inf - inf
        total = y + g
    assert_same_values(got[1][0], total)
    relu = np.where((total > 0) | np.isnan(total), total, nptype(0))  # NaN kept, -0.0 made 0.0
    assert_same_values(got[2][0], relu)


def test_on_a_gpu_dense_layers_run_one_kernel_after_the_product(monkeypatch):
    """fused_matmul's bias and activation, and relu_grad, each as one generated kernel (built
    once per dtype) on a GPU, the bias written into the product; other dtypes as before."""
    calls = []

    def fake_elementwise(source):
        def kernel(*arrays):
            calls.append((source.name, arrays))
            return arrays[2] if len(arrays) == 3 else np.zeros_like(arrays[0])

        return kernel

    dispatch_on_host(cupy_backend, monkeypatch)
    monkeypatch.setattr(cuda, "elementwise", fake_elementwise)
    a, w, b = np.ones((2, 3), np.float32), np.ones((3, 4), np.float32), np.ones(4, np.float32)
    for _ in range(2):
        y = cupy_backend.fused_matmul(a, w, b, "relu")
        assert calls[-1][1][2] is y and calls[-1][1][0] is y and calls[-1][1][1] is b
        cupy_backend.relu_grad(y, y)
    assert len({name for name, _ in calls}) == 2 and len(calls) == 4
    half = cupy_backend.fused_matmul(a.astype(np.float16), w.astype(np.float16), b.astype(np.float16), "relu")
    assert half.dtype == np.float16 and half.tolist() == [[4.0] * 4] * 2 and len(calls) == 4


def test_on_a_gpu_bias_sums_are_one_product_with_a_row_of_ones(monkeypatch, rng):
    """A sum over every axis but the last of a C-contiguous float array (a bias's gradient,
    relu_bias_grad's sum) is one product of a cached row of ones with the rows; other sums,
    dtypes and layouts keep the array's own sum."""
    products = []
    dispatch_on_host(cupy_backend, monkeypatch)
    monkeypatch.setattr(cupy_backend, "_ONES", {})
    monkeypatch.setattr(cuda, "elementwise", lambda source: lambda g, y: np.where(y > 0, g, 0).astype(g.dtype))
    module = types.SimpleNamespace(**{**vars(np), "matmul": lambda a, b: products.append(a.shape) or np.matmul(a, b)})
    monkeypatch.setattr(cupy_backend, "xp", module)
    g = rng.standard_normal((5, 4, 3, 6))
    for axes, keepdims in (((0, 1, 2), False), ((2, 0, -3), True), ((-4, 1, 2), False)):
        got = cupy_backend.sum(g, axes, keepdims)
        np.testing.assert_allclose(got, g.sum(axis=(0, 1, 2), keepdims=keepdims), rtol=1e-12)
    y = rng.standard_normal(g.shape).astype(np.float32)
    gz, summed = cupy_backend.relu_bias_grad(g.astype(np.float32), y)
    np.testing.assert_allclose(summed, np.where(y > 0, g, 0).sum(axis=(0, 1, 2)), rtol=1e-5, atol=1e-5)
    assert products == [(60,)] * 4 and [k[0] for k in cupy_backend._ONES] == [np.float64, np.float32]
    cupy_backend.sum(g[:, ::2], (0, 1, 2), False)  # not contiguous
    cupy_backend.sum(g, (0, 1), False)  # not every leading axis
    cupy_backend.sum(g.astype(np.float16), (0, 1, 2), False)
    cupy_backend.sum(g[0, 0, 0], (), False)
    assert len(products) == 4


@needs_gpu
@pytest.mark.parametrize("dtype", ["float32", "float64"])
def test_compiled_fused_programs_match_the_reference_on_a_gpu(dtype):
    """The same programs through CuPy and NVRTC, broadcasting included (a row and a scalar)."""
    results, cases = [], fused_cases(dtype)
    for program, inputs in cases:
        kernel = cuda.elementwise(with_registers(elementwise_source.fused_elementwise(program, len(inputs), dtype)))
        results.append([cupy_backend.to_host(a) for a in kernel(*(cupy_backend.from_host(x) for x in inputs))])
    check_fused_results(cases, results, dtype, flushes=True)
    program = (("input", 0), ("input", 1), ("input", 2), ("multiply", 0, 1), ("add", 3, 2), ("relu", 4))
    a, b, c = np.arange(-6.0, 6.0).reshape(3, 4).astype(dtype), np.arange(4.0).astype(dtype), np.asarray(-1.0, dtype)
    reference = functools.partial(get_op("fused_elementwise").reference, program=program)
    run = cupy_backend.bind_fused_elementwise(reference, program)
    got = run(*(cupy_backend.from_host(x) for x in (a, b, c)))
    assert got.flags.c_contiguous
    assert_same_values(cupy_backend.to_host(got), _reference(program, [a, b, c]))


def test_constants_are_literals_that_round_trip():
    """Finite constants as shortest decimal literals (float32 ones with an f), inf and NaN as
    bit patterns; the host-compiled programs above check how C parses them."""
    for dtype, nptype in NPTYPES.items():
        for c in [0.1, 1 / 3, -0.0, 1e-45, 5e-324, 3.4028234663852886e38, 1e300, 2**60 + 1, float("nan"), -np.inf]:
            with np.errstate(over="ignore"):
                x = nptype(c)
            text = elementwise_source.literal(c, dtype)
            if np.isfinite(x):
                parsed = nptype(float(text.rstrip("f")))
                assert parsed.tobytes() == x.tobytes() and text.endswith("f") == (dtype == "float32"), text
            else:
                assert text.lstrip("-").startswith(("__int_as_float(0x7f", "__longlong_as_double(0x7ff")), text


# ------------------------------------------------------------ adam
ADAM_SETTINGS = [(0.9, 0.999, 1e-7, False), (0.9, 0.999, 1e-7, True), (0.5, 0.75, 0.1, False), (0.8, 0.99, 1e-3, True)]


@needs_compiler
@pytest.mark.parametrize("dtype", ["float32", "float64"])
def test_generated_adam_steps_match_the_reference(dtype, tmp_path):
    """A few chained steps, each bit for bit the reference's (the host's pow in both)."""
    rng = np.random.default_rng(11)
    nptype, n = NPTYPES[dtype], 50
    kernels = [(elementwise_source.adam_update(dtype, *settings), n) for settings in ADAM_SETTINGS]
    harness = Harness(kernels, tmp_path)
    state = [[rng.standard_normal(n).astype(nptype), np.zeros(n, nptype), np.zeros(n, nptype)] for _ in kernels]
    for step in (1.0, 2.0, 3.0, 40.0):
        grads = [rng.standard_normal(n).astype(nptype) for _ in kernels]
        lr = np.float64(10.0 ** rng.uniform(-4, -1))
        inputs = [[*s, g, np.array([lr]), np.array([step])] for s, g in zip(state, grads, strict=True)]
        results = harness(inputs)
        for settings, s, g, got in zip(ADAM_SETTINGS, state, grads, results, strict=True):
            b1, b2, eps, on_sqrt_v = settings
            want = get_op("adam_update").reference(
                *s, g, nptype(lr), nptype(step), beta1=b1, beta2=b2, epsilon=eps, epsilon_on_sqrt_v=on_sqrt_v
            )
            for a, b in zip(got, want, strict=True):
                assert_same_values(a, b, f"step {step} {settings}")
        state = results


@needs_gpu
@pytest.mark.parametrize("dtype", ["float32", "float64"])
def test_compiled_adam_steps_match_the_reference_on_a_gpu(dtype):
    """Chained steps through CuPy, lr and step never read on the host."""
    rng, nptype = np.random.default_rng(12), NPTYPES[dtype]
    for beta1, beta2, eps, on_sqrt_v in ADAM_SETTINGS:
        host = [rng.standard_normal(40).astype(nptype), np.zeros(40, nptype), np.zeros(40, nptype)]
        device = [cupy_backend.from_host(a) for a in host]
        for step in (1.0, 2.0, 3.0, 40.0):
            g, lr = rng.standard_normal(40).astype(nptype), nptype(0.01)
            attrs = {"beta1": beta1, "beta2": beta2, "epsilon": eps, "epsilon_on_sqrt_v": on_sqrt_v}
            host = list(get_op("adam_update").reference(*host, g, lr, nptype(step), **attrs))
            scalars = (cupy_backend.from_host(np.asarray(lr)), cupy_backend.from_host(np.asarray(step, nptype)))
            device = list(cupy_backend.adam_update(*device, cupy_backend.from_host(g), *scalars, **attrs))
            for d, h in zip(device, host, strict=True):
                np.testing.assert_allclose(cupy_backend.to_host(d), h, rtol=8 * np.finfo(dtype).eps, atol=1e-30)


# ------------------------------------------------------------ the RawKernel files
RAW_SHIMS = r"""
#include <cmath>
#include <cstdio>
#include <cstring>
#include <pthread.h>
#include <vector>
#define __global__
#define __device__
#define __shared__
using std::exp; using std::log;
struct tf_dim3 { unsigned x = 0, y = 0, z = 0; };
static thread_local tf_dim3 threadIdx;
static tf_dim3 blockIdx, blockDim;
static pthread_barrier_t tf_barrier;
static void __syncthreads() { pthread_barrier_wait(&tf_barrier); }
template <typename T> static T max(T a, T b) { return std::fmax(a, b); }
template <typename T> static T atomicAdd(T* p, T v) { T old = *p; *p = old + v; return old; }  // launched serially
static inline float __int_as_float(int bits) { float x; std::memcpy(&x, &bits, sizeof x); return x; }
alignas(16) unsigned char shared_bytes[1 << 16];

struct tf_task { void (*run)(void*); void* kernel; unsigned thread; };
static void* tf_thread(void* p) {
    tf_task* task = static_cast<tf_task*>(p);
    threadIdx.x = task->thread;
    task->run(task->kernel);
    return nullptr;
}
// A block's threads as host threads meeting at __syncthreads; blocks one after another.
template <typename F> static void launch(unsigned grid, unsigned block, F kernel) {
    blockDim.x = block;
    std::vector<pthread_t> ids(block);
    std::vector<tf_task> tasks(block);
    for (unsigned b = 0; b < grid; ++b) {
        blockIdx.x = b;
        pthread_barrier_init(&tf_barrier, nullptr, block);
        for (unsigned t = 0; t < block; ++t) {
            tasks[t] = {[](void* k) { (*static_cast<F*>(k))(); }, &kernel, t};
            pthread_create(&ids[t], nullptr, tf_thread, &tasks[t]);
        }
        for (unsigned t = 0; t < block; ++t) pthread_join(ids[t], nullptr);
        pthread_barrier_destroy(&tf_barrier);
    }
}
// Threads one at a time, in order (kernels without barriers; atomics need no locking).
template <typename F> static void launch_serial(unsigned grid, unsigned block, F kernel) {
    blockDim.x = block;
    for (unsigned b = 0; b < grid; ++b) {
        blockIdx.x = b;
        for (unsigned t = 0; t < block; ++t) { threadIdx.x = t; kernel(); }
    }
}
template <typename T>
static void run_files(std::FILE* in, std::FILE* out, int rows, int classes, long long n, int width, int table,
                      void (*xent)(const T*, const long long*, T*, T*, int, int),
                      void (*scatter)(T*, const long long*, const T*, long long, int)) {
    std::vector<T> z(rows * classes), updates(n * width), base(table * width);
    std::vector<long long> labels(rows), ids(n);
    std::fread(z.data(), sizeof(T), z.size(), in);
    std::fread(labels.data(), 8, labels.size(), in);
    std::fread(base.data(), sizeof(T), base.size(), in);
    std::fread(updates.data(), sizeof(T), updates.size(), in);
    std::fread(ids.data(), 8, ids.size(), in);
    for (unsigned block : {32u, 256u}) {
        std::vector<T> loss(rows), grad(rows * classes), table_out(base);
        launch(rows, block, [&] { xent(z.data(), labels.data(), loss.data(), grad.data(), rows, classes); });
        const unsigned blocks = (n * width + block - 1) / block;
        launch_serial(blocks, block, [&] { scatter(table_out.data(), ids.data(), updates.data(), n, width); });
        std::fwrite(loss.data(), sizeof(T), loss.size(), out);
        std::fwrite(grad.data(), sizeof(T), grad.size(), out);
        std::fwrite(table_out.data(), sizeof(T), table_out.size(), out);
    }
}
"""
RAW_MAIN = """
int main(int argc, char** argv) {
    std::FILE* in = std::fopen(argv[1], "rb");
    std::FILE* out = std::fopen(argv[2], "wb");
    run_files<float>(in, out, ARGS, sparse_softmax_xent_f32, scatter_add_rows_f32);
    run_files<double>(in, out, ARGS, sparse_softmax_xent_f64, scatter_add_rows_f64);
    std::fclose(in);
    std::fclose(out);
    return 0;
}
"""


@needs_compiler
def test_raw_kernel_files_match_the_references(tmp_path):
    """softmax_xent.cu and scatter_add_rows.cu as the backend launches them, with blocks of 32
    and 256 threads, in both dtypes."""
    rng = np.random.default_rng(5)
    rows, classes, n_ids, width, table = 6, 37, 9, 5, 4
    logits = rng.standard_normal((rows, classes)) * 4
    logits[1, 3] = -np.inf
    labels = rng.integers(0, classes, rows)
    ids = rng.integers(0, table, n_ids)
    updates, base = rng.standard_normal((n_ids, width)), rng.standard_normal((table, width))
    main = RAW_MAIN.replace("ARGS", f"{rows}, {classes}, {n_ids}, {width}, {table}")
    sources = [cuda.SOURCES[name].read_text() for name in ("softmax_xent", "scatter_add_rows")]
    binary = _compile("\n".join([RAW_SHIMS, *sources, main]), tmp_path, "raw")
    data, out_bytes = b"", 0
    for nptype in (np.float32, np.float64):
        data += logits.astype(nptype).tobytes() + labels.astype(np.int64).tobytes()
        data += base.astype(nptype).tobytes() + updates.astype(nptype).tobytes() + ids.astype(np.int64).tobytes()
        out_bytes += 2 * np.dtype(nptype).itemsize * (rows + rows * classes + table * width)
    out = _run(binary, tmp_path, data, out_bytes)
    offset = 0
    for nptype, rtol in ((np.float32, 2e-6), (np.float64, 1e-13)):
        want_loss, want_grad = get_op("sparse_softmax_cross_entropy_with_logits").reference(
            logits.astype(nptype), labels
        )
        want_table = get_op("scatter_add").reference(base.astype(nptype), ids, updates.astype(nptype), 0)
        for _block in (32, 256):
            got = []
            for shape in ((rows,), (rows, classes), (table, width)):
                got.append(np.frombuffer(out, nptype, int(np.prod(shape)), offset).reshape(shape))
                offset += got[-1].nbytes
            np.testing.assert_allclose(got[0], want_loss, rtol=rtol, atol=rtol)
            np.testing.assert_allclose(got[1], want_grad, rtol=rtol, atol=rtol)
            np.testing.assert_array_equal(got[2], want_table)  # added in the reference's order


# ------------------------------------------------------------ the stand-in
def test_without_a_gpu_the_backend_runs_the_references(monkeypatch):
    """On the stand-in, fused programs bind to the reference itself, and Adam's step runs in
    array ops on the device scalars, with the reference's numbers and no host read."""
    if cupy_backend.ON_GPU:
        pytest.skip("a GPU is present, so the stand-in is not used")
    device = stand_in_gpu(monkeypatch)
    assert not cupy_backend.ON_GPU
    program = (("input", 0), ("input", 1), ("maximum", 0, 1), ("const", 0.5), ("multiply", 2, 3), ("tanh", 4))
    reference = get_op("fused_elementwise").reference
    assert cupy_backend.bind_fused_elementwise(reference, program) is reference
    rng = np.random.default_rng(2)
    a, b = rng.standard_normal((3, 4)).astype(np.float32), rng.standard_normal(4).astype(np.float32)
    kernel = get_op("fused_elementwise").bound_kernel("gpu", {"program": program})
    got = cupy_backend.to_host(kernel(cupy_backend.from_host(a), cupy_backend.from_host(b)))
    np.testing.assert_array_equal(got, reference(a, b, program=program))
    for on_sqrt_v in (False, True):
        p, m, g = (rng.standard_normal(6).astype(np.float32) for _ in range(3))
        v = np.abs(rng.standard_normal(6)).astype(np.float32)
        reads = sum(HOST_READS.values())
        with tp.device(device):
            outs = tp.ops.optim.adam_update(
                tp.tensor(p),
                tp.tensor(m),
                tp.tensor(v),
                tp.tensor(g),
                tp.tensor(np.float32(0.01)),
                tp.tensor(np.float32(3.0)),
                epsilon_on_sqrt_v=on_sqrt_v,
            )
            assert sum(HOST_READS.values()) == reads
        want = get_op("adam_update").reference(
            p,
            m,
            v,
            g,
            np.float32(0.01),
            np.float32(3.0),
            beta1=0.9,
            beta2=0.999,
            epsilon=1e-7,
            epsilon_on_sqrt_v=on_sqrt_v,
        )
        for o, w in zip(outs, want, strict=True):
            assert str(o.device) == device
            np.testing.assert_array_equal(o.numpy(), w)


def test_on_a_gpu_each_program_and_dtype_gets_one_generated_kernel(monkeypatch):
    """The GPU path's dispatch, with the compiled kernel replaced by a recorder: float32 and
    float64 inputs reach the generated kernel (its source written and compiled once per program
    and dtype), float16 inputs the reference; Adam's kernel gets numbers for lr and step as
    float64 device scalars, and 0-d device arrays as they are."""
    built = []

    def fake_elementwise(source):
        built.append(source)
        if source.name.startswith("tapeflow_adam"):
            return lambda *arrays: ("adam", arrays)
        return lambda *arrays: ("kernel", source, arrays)

    dispatch_on_host(cupy_backend, monkeypatch)
    monkeypatch.setattr(cuda, "elementwise", fake_elementwise)
    program = (("input", 0), ("input", 1), ("add", 0, 1), ("rsqrt", 2))
    reference = get_op("fused_elementwise").bound_kernel("cpu", {"program": program})
    run = cupy_backend.bind_fused_elementwise(reference, program)
    x32, y32 = np.ones((2, 3), np.float32), np.ones(3, np.float32)
    for _ in range(2):
        tag, source, arrays = run(x32, y32)
        assert tag == "kernel" and arrays == (x32, y32) and "float32 tf_in1" in source.in_params
    run(x32.astype(np.float64), y32.astype(np.float64))
    assert [s.in_params.split()[0] for s in built] == ["float32", "float64"]
    half = run(x32.astype(np.float16), y32.astype(np.float16))
    assert half.dtype == np.float16 and half.tolist() == [[np.float16(0.7071)] * 3] * 2
    tag, arrays = cupy_backend.adam_update(x32, x32, x32, x32, np.float32(0.1), 2, 0.9, 0.999, 1e-7)
    assert tag == "adam" and [a.dtype for a in arrays[4:]] == [np.float64] * 2 and arrays[5].shape == ()
    lr, step = np.asarray(0.1, np.float32), np.asarray(2, np.int64)
    tag, arrays = cupy_backend.adam_update(x32, x32, x32, x32, lr, step, 0.9, 0.999, 1e-7)
    assert arrays[4] is lr and arrays[5] is step
