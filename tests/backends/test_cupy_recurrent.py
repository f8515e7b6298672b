"""The GPU backend's whole-sequence LSTM and GRU (a GEMM and a fused cell kernel a step): on
the stand-in they equal the NumPy references (float64 bit for bit but for the weight
gradients, summed over all steps in one GEMM); the GPU path builds one ElementwiseKernel per
cell kind and launches it once a step; the generated CUDA C of the cells, compiled for the
host, runs the whole ops to the references' numbers; and the LSTM and GRU layers train on
gpu:0 as on the CPU."""

import numpy as np
import pytest
from kernels.cuda_host import COMPILER, compile_program, run_program
from strict_arrays import HOST_READS, dispatch_on_host, stand_in_gpu, use_strict_arrays

import tapeflow as tp
from tapeflow._kernels import cuda
from tapeflow._kernels.cuda import recurrent_source
from tapeflow._kernels.cuda.elementwise_source import CTYPES
from tapeflow.backends import cupy_backend, cupy_recurrent
from tapeflow.ops.registry import get_op

needs_compiler = pytest.mark.skipif(COMPILER is None, reason="no C++ compiler (c++, g++ or clang++) on PATH")
B, T, U = 3, 5, 4
RTOL = {np.float64: 1e-12, np.float32: 2e-5, np.float16: 2e-2}


def _case(dtype, kind: str, masked: bool, seed: int = 0):
    """(forward inputs, mask tuple, gradient seeds) of an LSTM or GRU of B x T x U."""
    rng = np.random.default_rng(seed)
    gates = 4 if kind == "lstm" else 3
    x = rng.standard_normal((B, T, gates * U)) * 1.5
    x[0, 1, 0] = 40.0  # saturated gates: exp overflows in one branch of the sigmoid
    x[1, 2, U] = -40.0
    h0, c0 = rng.standard_normal((B, U)), rng.standard_normal((B, U))
    kernel = rng.standard_normal((U, gates * U)) * 0.5
    mask = ()
    if masked:
        keep = rng.random((B, T)) > 0.4
        keep[0, :2] = False  # a row that starts masked: outputs are zeros until its first step
        keep[2] = False  # a row that never runs
        mask = (keep,)
    seeds = rng.standard_normal((B, T, U)), rng.standard_normal((B, U)), rng.standard_normal((B, U))
    if kind == "lstm":
        inputs = (x, h0, c0, kernel)
    else:
        inputs = (x, h0, kernel, rng.standard_normal(gates * U))
    return tuple(a.astype(dtype) for a in inputs), mask, tuple(a.astype(dtype) for a in seeds)


def check_results(got, want, dtype, exact: int, label: str) -> None:
    """The first `exact` results equal the reference's (float64 bit for bit), the rest to RTOL."""
    assert len(got) == len(want)
    for k, (g, w) in enumerate(zip(got, want, strict=True)):
        assert g.shape == w.shape and g.dtype == w.dtype, f"{label}: result {k}"
        if dtype is np.float64 and k < exact:
            np.testing.assert_array_equal(g, w, err_msg=f"{label}: result {k}")
        else:
            tol = RTOL[dtype]
            np.testing.assert_allclose(g, w, rtol=tol, atol=tol, err_msg=f"{label}: result {k}")


def _host(a):
    return cupy_backend.to_host(a)


def _device(arrays):
    return [cupy_backend.from_host(a) for a in arrays]


LSTM_CASES = [(gb, m) for gb in (False, True) for m in (False, True)]
GRU_CASES = [(ra, gb, m) for ra in (True, False) for gb in (False, True) for m in (False, True)]


def _lstm_both(dtype, go_backwards, masked, run):
    """(run's results, the references') for the forward op and its gradient."""
    inputs, mask, (gys, gh, gc) = _case(dtype, "lstm", masked)
    ref = get_op("lstm_sequence").reference(*inputs, *mask, go_backwards=go_backwards)
    got = run("lstm_sequence", (*inputs, *mask), {"go_backwards": go_backwards})
    grad_args = (gys, gh, gc, *inputs[1:], ref[0], ref[3], ref[4], *mask)
    ref_grad = get_op("lstm_sequence_grad").reference(*grad_args, go_backwards=go_backwards)
    got_grad = run("lstm_sequence_grad", grad_args, {"go_backwards": go_backwards})
    return (got, ref), (got_grad, ref_grad)


def _gru_both(dtype, reset_after, go_backwards, masked, run):
    inputs, mask, (gys, gh, _) = _case(dtype, "gru", masked, seed=1)
    attrs = {"reset_after": reset_after, "go_backwards": go_backwards}
    ref = get_op("gru_sequence").reference(*inputs, *mask, **attrs)
    got = run("gru_sequence", (*inputs, *mask), attrs)
    grad_args = (gys, gh, inputs[1], inputs[2], ref[0], ref[2], *mask)
    ref_grad = get_op("gru_sequence_grad").reference(*grad_args, **attrs)
    got_grad = run("gru_sequence_grad", grad_args, attrs)
    return (got, ref), (got_grad, ref_grad)


def _on_backend(name, arrays, attrs):
    """The GPU backend's function `name` on device copies of `arrays`, results on the host."""
    out = getattr(cupy_backend, name)(*_device(arrays), **attrs)
    return tuple(_host(a) for a in out)


# ------------------------------------------------------------ the stand-in: the references' numbers
def _stand_in(monkeypatch):
    """The GPU backend on StrictArrays, its cells as array math (on a GPU machine too)."""
    use_strict_arrays(cupy_backend, monkeypatch)
    monkeypatch.setattr(cupy_backend, "ON_GPU", False)


@pytest.mark.parametrize("dtype", [np.float64, np.float32, np.float16])
@pytest.mark.parametrize(("go_backwards", "masked"), LSTM_CASES)
def test_lstm_on_the_stand_in_equals_the_reference(monkeypatch, dtype, go_backwards, masked):
    _stand_in(monkeypatch)
    reads = sum(HOST_READS.values())
    forward, backward = _lstm_both(dtype, go_backwards, masked, _on_backend)
    label = f"lstm {dtype.__name__} go_backwards={go_backwards} masked={masked}"
    check_results(*forward, dtype, exact=5, label=label)
    check_results(*backward, dtype, exact=3, label=label + " gradient")
    assert sum(HOST_READS.values()) == reads + 9  # the results' copies to the host, nothing else


@pytest.mark.parametrize("dtype", [np.float64, np.float32, np.float16])
@pytest.mark.parametrize(("reset_after", "go_backwards", "masked"), GRU_CASES)
def test_gru_on_the_stand_in_equals_the_reference(monkeypatch, dtype, reset_after, go_backwards, masked):
    _stand_in(monkeypatch)
    reads = sum(HOST_READS.values())
    forward, backward = _gru_both(dtype, reset_after, go_backwards, masked, _on_backend)
    label = f"gru {dtype.__name__} reset_after={reset_after} go_backwards={go_backwards} masked={masked}"
    check_results(*forward, dtype, exact=3, label=label)
    check_results(*backward, dtype, exact=2, label=label + " gradient")
    assert sum(HOST_READS.values()) == reads + 7


def test_empty_sequences_give_the_references_results(monkeypatch):
    _stand_in(monkeypatch)
    rng = np.random.default_rng(3)
    h0, c0, gh, gc = (rng.standard_normal((2, 3)) for _ in range(4))
    x, kernel, gys = np.zeros((2, 0, 12)), rng.standard_normal((3, 12)), np.zeros((2, 0, 3))
    ref = get_op("lstm_sequence").reference(x, h0, c0, kernel, go_backwards=False)
    check_results(_on_backend("lstm_sequence", (x, h0, c0, kernel), {}), ref, np.float64, 5, "lstm")
    args = (gys, gh, gc, h0, c0, kernel, ref[0], ref[3], ref[4])
    want = get_op("lstm_sequence_grad").reference(*args, go_backwards=False)
    check_results(_on_backend("lstm_sequence_grad", args, {}), want, np.float64, 4, "lstm gradient")
    kernel, bias = rng.standard_normal((3, 9)), rng.standard_normal(9)
    for reset_after in (True, False):
        attrs = {"reset_after": reset_after, "go_backwards": True}
        ref = get_op("gru_sequence").reference(x[..., :9], h0, kernel, bias, **attrs)
        check_results(_on_backend("gru_sequence", (x[..., :9], h0, kernel, bias), attrs), ref, np.float64, 3, "gru")
        args = (gys, gh, h0, kernel, ref[0], ref[2])
        want = get_op("gru_sequence_grad").reference(*args, **attrs)
        check_results(_on_backend("gru_sequence_grad", args, attrs), want, np.float64, 4, "gru gradient")


# ------------------------------------------------------------ the GPU path: one kernel per cell kind
KINDS = {
    ("lstm_sequence", None): ["lstm_forward"],
    ("lstm_sequence_grad", None): ["lstm_backward"],
    ("gru_sequence", True): ["gru_forward"],
    ("gru_sequence", False): ["gru_forward_gates", "gru_forward_update"],
    ("gru_sequence_grad", True): ["gru_backward"],
    ("gru_sequence_grad", False): ["gru_backward_gates", "gru_backward_update"],
}


def _cell_name(source) -> str:
    """The cell kind of a generated source (named tapeflow_rnn_<cell>_<dtype>)."""
    name = source.name.removeprefix("tapeflow_rnn_").rsplit("_", 1)[0]
    assert name in recurrent_source.CELLS, source.name
    return name


class _Recorder:
    """`cuda.elementwise` replaced: the sources it is asked to build, and the launches of each,
    run by `launch(cell, inputs, outputs)` (the cell's array math unless given)."""

    def __init__(self, launch=None):
        self.built, self.launches = [], []
        self.launch = launch or (lambda cell, inputs, outputs: recurrent_source.run_cell(np, cell, inputs, outputs))

    def __call__(self, source):
        self.built.append(source)
        cell = recurrent_source.CELLS[_cell_name(source)]

        def kernel(*arrays):
            assert len(arrays) == len(cell.inputs) + len(cell.outputs), source.name
            self.launches.append(cell.name)
            inputs, outputs = arrays[: len(cell.inputs)], arrays[len(cell.inputs) :]
            for (dtype, _, _), a in zip(source.inputs, inputs, strict=True):
                assert a.dtype == np.dtype(dtype), (source.name, a.dtype, dtype)
            for a in outputs:
                assert a.shape == (B, U) and a.dtype == np.dtype(source.outputs[0][0]), source.name
            self.launch(cell.name, inputs, outputs)

        return kernel


def _gpu_path(monkeypatch, recorder):
    dispatch_on_host(cupy_backend, monkeypatch)
    monkeypatch.setattr(cuda, "elementwise", recorder)

    def run(name, arrays, attrs):
        recorder.built.clear()
        recorder.launches.clear()
        out = getattr(cupy_backend, name)(*arrays, **attrs)
        kinds = KINDS[name, attrs.get("reset_after")]
        dtype = np.dtype(arrays[0].dtype).name
        if dtype in CTYPES:
            assert [_cell_name(s) for s in recorder.built] == kinds, name  # each built once per call
            assert recorder.launches == [k for _ in range(T) for k in kinds], name  # launched once a step
            assert all(s.name.endswith(dtype) for s in recorder.built)
        else:
            assert recorder.built == [] and recorder.launches == []  # array math for other dtypes
        return out

    return run


@pytest.mark.skipif(cupy_backend.ON_GPU, reason="fakes the GPU path on NumPy")
@pytest.mark.parametrize("dtype", [np.float64, np.float32, np.float16])
def test_the_gpu_path_builds_one_elementwise_kernel_per_cell_kind(monkeypatch, dtype):
    run = _gpu_path(monkeypatch, _Recorder())
    for go_backwards, masked in LSTM_CASES:
        forward, backward = _lstm_both(dtype, go_backwards, masked, run)
        check_results(*forward, dtype, exact=5, label="lstm")
        check_results(*backward, dtype, exact=3, label="lstm gradient")
    for reset_after, go_backwards, masked in GRU_CASES:
        forward, backward = _gru_both(dtype, reset_after, go_backwards, masked, run)
        check_results(*forward, dtype, exact=3, label="gru")
        check_results(*backward, dtype, exact=2, label="gru gradient")
    sources = {recurrent_source.cell_source(c, "float32") for c in recurrent_source.CELLS}
    assert len(sources) == len(recurrent_source.CELLS)  # one text per cell kind and dtype
    assert recurrent_source.cell_source("lstm_forward", "float32") is recurrent_source.cell_source(
        "lstm_forward", "float32"
    )


@pytest.mark.skipif(not cupy_backend.ON_GPU, reason="needs CuPy and a CUDA GPU")
@pytest.mark.parametrize("dtype", [np.float64, np.float32])
def test_on_a_gpu_the_compiled_cells_give_the_references_numbers(dtype):
    for go_backwards, masked in LSTM_CASES:
        forward, backward = _lstm_both(dtype, go_backwards, masked, _on_backend)
        check_results(*forward, dtype, exact=0, label=f"lstm {go_backwards} {masked}")
        check_results(*backward, dtype, exact=0, label=f"lstm gradient {go_backwards} {masked}")
    for reset_after, go_backwards, masked in GRU_CASES:
        forward, backward = _gru_both(dtype, reset_after, go_backwards, masked, _on_backend)
        check_results(*forward, dtype, exact=0, label=f"gru {reset_after} {go_backwards} {masked}")
        check_results(*backward, dtype, exact=0, label=f"gru gradient {reset_after} {go_backwards} {masked}")


# ------------------------------------------------------------ the generated CUDA C, compiled for the host
SHIMS = r"""
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <vector>
#include <math.h>
#define __device__
#define __forceinline__ inline
using std::exp; using std::tanh;
"""


def _host_program(dtype: str) -> str:
    """Every cell of `dtype` as a host function over n elements, chosen by its index: reads
    the inputs (bools as bytes) one after another, writes the outputs."""
    functions, cases = [], []
    for k, name in enumerate(recurrent_source.CELLS):
        source = recurrent_source.cell_source(name, dtype)
        lines = [f"static void cell_{k}(long tf_count, std::FILE* in, std::FILE* out) {{"]
        for ctype, param, _ in source.inputs:
            t = "unsigned char" if ctype == "bool" else CTYPES[ctype]
            read = f"std::fread(v_{param}.data(), sizeof({t}), tf_count, in)"
            lines.append(f"    std::vector<{t}> v_{param}(tf_count);")
            lines.append(f"    if ({read} != (size_t)tf_count) std::exit(2);")
        for ctype, param, _ in source.outputs:
            lines.append(f"    std::vector<{CTYPES[ctype]}> v_{param}(tf_count);")
        lines.append("    for (long tf_k = 0; tf_k < tf_count; ++tf_k) {")
        for ctype, param, _ in source.inputs:
            value = f"v_{param}[tf_k] != 0" if ctype == "bool" else f"v_{param}[tf_k]"
            lines.append(f"        const {'bool' if ctype == 'bool' else CTYPES[ctype]} {param} = {value};")
        for ctype, param, _ in source.outputs:
            lines.append(f"        {CTYPES[ctype]}& {param} = v_{param}[tf_k];")
        lines += ["        {", source.operation, "        }", "    }"]
        for ctype, param, _ in source.outputs:
            lines.append(f"    std::fwrite(v_{param}.data(), sizeof({CTYPES[ctype]}), tf_count, out);")
        lines.append("}")
        functions.append("\n".join(lines))
        cases.append(f"        case {k}: cell_{k}(header[1], in, out); break;")
        preamble = source.preamble
    main = [
        "int main(int argc, char** argv) {",
        '    std::FILE* in = std::fopen(argv[1], "rb");',
        '    std::FILE* out = std::fopen(argv[2], "wb");',
        "    long header[2];",
        "    if (!in || !out || std::fread(header, sizeof(long), 2, in) != 2) return 2;",
        "    switch (header[0]) {",
        *cases,
        "        default: return 3;",
        "    }",
        "    std::fclose(in);",
        "    std::fclose(out);",
        "    return 0;",
        "}",
    ]
    return "\n".join([SHIMS, preamble, *functions, *main])


class _HostCells:
    """The cells of each dtype compiled for the host (once), launched as the GPU would be:
    inputs broadcast to the outputs' shape, results written into the outputs."""

    def __init__(self, directory):
        self.directory, self.binaries = directory, {}
        for dtype in CTYPES:
            (directory / dtype).mkdir()
            self.binaries[dtype] = compile_program(_host_program(dtype), directory / dtype, "cells")

    def __call__(self, name, inputs, outputs):
        dtype = np.dtype(outputs[0].dtype)
        shape, n = outputs[0].shape, int(np.prod(outputs[0].shape))
        header = np.array([list(recurrent_source.CELLS).index(name), n], dtype=np.int64)
        data = header.tobytes() + b"".join(np.ascontiguousarray(np.broadcast_to(a, shape)).tobytes() for a in inputs)
        out = run_program(self.binaries[dtype.name], self.directory / dtype.name, data)
        assert len(out) == n * dtype.itemsize * len(outputs)
        for k, o in enumerate(outputs):
            o[...] = np.frombuffer(out, dtype, n, k * n * dtype.itemsize).reshape(shape)


@pytest.fixture(scope="module")
def host_cells(tmp_path_factory):
    if COMPILER is None:
        pytest.skip("no C++ compiler (c++, g++ or clang++) on PATH")
    return _HostCells(tmp_path_factory.mktemp("rnn_cells"))


@needs_compiler
@pytest.mark.skipif(cupy_backend.ON_GPU, reason="fakes the GPU path on NumPy")
@pytest.mark.parametrize("dtype", [np.float64, np.float32])
def test_the_generated_cells_compiled_for_the_host_run_the_ops_to_the_references(monkeypatch, host_cells, dtype):
    """The whole GPU path (GEMMs in NumPy) with every cell launch run by the host-compiled CUDA
    C: the references' numbers to a few rounding errors (the C library's exp and tanh are not
    NumPy's)."""
    run = _gpu_path(monkeypatch, _Recorder(host_cells))
    exact = 0  # exp and tanh round differently: nothing is bit for bit
    for go_backwards, masked in LSTM_CASES:
        forward, backward = _lstm_both(dtype, go_backwards, masked, run)
        check_results(*forward, dtype, exact=exact, label=f"lstm {go_backwards} {masked}")
        check_results(*backward, dtype, exact=exact, label=f"lstm gradient {go_backwards} {masked}")
    for reset_after, go_backwards, masked in GRU_CASES:
        forward, backward = _gru_both(dtype, reset_after, go_backwards, masked, run)
        check_results(*forward, dtype, exact=exact, label=f"gru {reset_after} {go_backwards} {masked}")
        check_results(*backward, dtype, exact=exact, label=f"gru gradient {reset_after} {go_backwards} {masked}")


@needs_compiler
@pytest.mark.parametrize("dtype", ["float64", "float32"])
def test_each_host_compiled_cell_matches_its_array_math_on_extreme_values(host_cells, dtype):
    """Every cell on random and saturating values (|x| up to 1e4, where exp overflows): the C
    and the array math agree to a few units in the last place, and neither gives NaN."""
    rng = np.random.default_rng(9)
    nptype = np.dtype(dtype)
    for name, cell in recurrent_source.CELLS.items():
        inputs = []
        for param in cell.inputs:
            if param in cell.bools:
                inputs.append(rng.random((B, U)) > 0.3)
            else:
                x = rng.standard_normal((B, U)) * np.exp(rng.uniform(-2, 2, (B, U)))
                x[0, 0], x[1, 1] = 1e4, -1e4
                inputs.append(x.astype(nptype))
        got = [np.empty((B, U), nptype) for _ in cell.outputs]
        want = [np.empty((B, U), nptype) for _ in cell.outputs]
        host_cells(name, inputs, got)
        with np.errstate(over="ignore"):
            recurrent_source.run_cell(np, name, inputs, want)
        for out, g, w in zip(cell.outputs, got, want, strict=True):
            assert not np.isnan(g).any() or np.isnan(w).any(), f"{name}.{out}"
            scale = np.maximum(np.abs(w), 1.0)
            tol = 64 * np.finfo(nptype).eps
            assert np.all((np.abs(g - w) <= tol * scale) | (np.isinf(w) & (g == w))), f"{name}.{out}: {g} != {w}"


# ------------------------------------------------------------ the layers on gpu:0
def _train_step(layer, x, mask, where, frozen):
    """Outputs and the gradients (inputs, then weights) of the sum of the outputs' squares,
    eagerly or as a frozen graph."""

    def step(inputs, *mask):
        with tp.GradientTape() as tape:
            tape.watch(inputs)
            out = layer(inputs, mask=mask[0] if mask else None, training=True)
            outputs = out if isinstance(out, list) else [out]
            loss = sum(tp.sum(o * o) for o in outputs)
        return outputs, tape.gradient(loss, [inputs, *layer.trainable_weights])

    with tp.device(where):
        args = [tp.tensor(x)] + ([] if mask is None else [tp.tensor(mask)])
        outputs, grads = tp.function(step)(*args) if frozen else step(*args)
    return [o.numpy() for o in outputs], [tp.convert_to_tensor(g).numpy() for g in grads]


LAYERS = [
    ("lstm", lambda: tp.layers.LSTM(3, return_sequences=True, return_state=True)),
    ("lstm_backwards", lambda: tp.layers.LSTM(3, go_backwards=True)),
    ("gru", lambda: tp.layers.GRU(3, return_sequences=True, return_state=True)),
    ("gru_reset_before", lambda: tp.layers.GRU(3, reset_after=False, go_backwards=True, return_sequences=True)),
]


@pytest.mark.parametrize("frozen", [False, True], ids=["eager", "frozen"])
@pytest.mark.parametrize("masked", [False, True], ids=["unmasked", "masked"])
@pytest.mark.parametrize(("name", "factory"), LAYERS, ids=[c[0] for c in LAYERS])
def test_the_layers_train_on_the_gpu_through_the_fused_steps(monkeypatch, name, factory, masked, frozen):
    device = stand_in_gpu(monkeypatch)
    op = "lstm_sequence" if name.startswith("lstm") else "gru_sequence"
    calls = []
    for fn in (op, op + "_grad"):
        original = getattr(cupy_recurrent, fn)
        monkeypatch.setattr(
            cupy_recurrent, fn, lambda *a, _fn=fn, _original=original, **k: calls.append(_fn) or _original(*a, **k)
        )
    rng = np.random.default_rng(4)
    x = rng.standard_normal((2, 5, 4)).astype(np.float32)
    mask = None
    if masked:
        mask = np.ones((2, 5), bool)
        mask[0, 3:] = False
        mask[1, :2] = False
    on_cpu = factory()
    on_cpu(tp.tensor(x))
    want_out, want_grads = _train_step(on_cpu, x, mask, "cpu", frozen)
    with tp.device(device):
        there = factory()
        there(tp.tensor(x))
    there.set_weights(on_cpu.get_weights())
    calls.clear()  # building ran the op in inference
    got_out, got_grads = _train_step(there, x, mask, device, frozen)
    assert calls == [op, op + "_grad"]  # one op each way, run by cupy_recurrent
    for got, want in zip(got_out + got_grads, want_out + want_grads, strict=True):
        np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5)
