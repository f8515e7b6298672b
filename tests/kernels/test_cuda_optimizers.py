"""The optimizer steps as one generated kernel per variable: each CUDA source compiled for the
host and run against its op's NumPy reference (bit for bit, float32 and float64), the GPU
dispatch with the compiled kernel replaced by a recorder, and each optimizer's step on every
accelerator (the stand-in GPU counting host reads) against the CPU."""

import numpy as np
import pytest
from strict_arrays import HOST_READS, dispatch_on_host
from test_cuda_sources import NPTYPES, Harness, assert_same_values, needs_compiler

import tapeflow as tp
from tapeflow import _compat
from tapeflow._kernels import cuda
from tapeflow._kernels.cuda import elementwise_source
from tapeflow.backends import cupy_backend
from tapeflow.ops import registry
from tapeflow.ops.registry import get_op

N = 40
SGD_SETTINGS = [(0.9, False), (0.9, True), (0.5, True), (0.0, False)]
RMSPROP_SETTINGS = [(0.9, 0.0, 1e-7, False), (0.8, 0.5, 1e-7, False), (0.9, 0.0, 1e-3, True), (0.95, 0.3, 1e-7, True)]
ADAGRAD_SETTINGS = [(1e-7,), (0.1,)]
ADAMW_SETTINGS = [(0.004, 0.9, 0.999, 1e-7, True), (0.1, 0.5, 0.75, 0.1, False)]


def _slots(name: str, settings) -> int:
    """How many slot arrays a kernel of `name` with `settings` reads."""
    if name == "rmsprop_update":
        _, momentum, _, centered = settings
        return 1 + (momentum > 0) + bool(centered)
    return {"sgd_momentum_update": 1, "adagrad_update": 1, "adamw_update": 2}[name]


def _attrs(name: str, settings) -> dict:
    keys = {
        "sgd_momentum_update": ("momentum", "nesterov"),
        "rmsprop_update": ("rho", "momentum", "epsilon", "centered"),
        "adagrad_update": ("epsilon",),
        "adamw_update": ("weight_decay", "beta1", "beta2", "epsilon", "epsilon_on_sqrt_v"),
    }[name]
    return dict(zip(keys, settings, strict=True))


def _cases():
    """(op name, settings, rate dtype) of every kernel checked."""
    cases = [("sgd_momentum_update", s, "float64") for s in SGD_SETTINGS]
    cases += [("rmsprop_update", s, "float64") for s in RMSPROP_SETTINGS]
    cases += [("adagrad_update", s, "float64") for s in ADAGRAD_SETTINGS]
    cases += [("adamw_update", s, rate) for s in ADAMW_SETTINGS for rate in ("float32", "float64")]
    return cases


def _source(name: str, dtype: str, settings, rate: str):
    make = getattr(elementwise_source, name)
    return make(dtype, *settings, rate) if name == "adamw_update" else make(dtype, *settings)


def _reference(name: str, param, slots, grad, lr, step, settings):
    """The op's reference, with its inputs in the op's order; returns (param, *slots)."""
    reference, attrs = get_op(name).reference, _attrs(name, settings)
    if name == "adamw_update":
        return reference(param, *slots, grad, lr, step, **attrs)
    if name == "rmsprop_update":
        return reference(param, slots[0], grad, lr, *slots[1:], **attrs)
    return reference(param, *slots, grad, lr, **attrs)


def _kernel_inputs(name: str, param, slots, grad, lr, step):
    """The same inputs in the kernel's order, the scalars as one-element float64 arrays."""
    scalars = [np.array([lr], np.float64)] + ([np.array([step], np.float64)] if name == "adamw_update" else [])
    if name == "rmsprop_update":
        return [param, slots[0], grad, *slots[1:], *scalars]
    return [param, *slots, grad, *scalars]


@needs_compiler
@pytest.mark.parametrize("dtype", ["float32", "float64"])
def test_generated_optimizer_steps_match_the_references(dtype, tmp_path):
    """A few chained steps of every kernel, each bit for bit the reference's; gradients include
    zeros (an Adagrad or RMSprop denominator of epsilon alone) and the slots start at zero."""
    rng, nptype = np.random.default_rng(21), NPTYPES[dtype]
    cases = _cases()
    harness = Harness([(_source(name, dtype, s, rate), N) for name, s, rate in cases], tmp_path)
    state = [
        [rng.standard_normal(N).astype(nptype), *(np.zeros(N, nptype) for _ in range(_slots(name, s)))]
        for name, s, _ in cases
    ]
    for step in (1.0, 2.0, 3.0, 25.0):
        grads = [rng.standard_normal(N).astype(nptype) for _ in cases]
        for g in grads:
            g[:3] = 0.0
        rates = [np.float64(10.0 ** rng.uniform(-4, -1)) for _ in cases]
        # the rate as the kernel gets it: a float32 learning rate arrives rounded, as float64
        rates = [
            np.float64(np.float32(r)) if rate == "float32" else r for r, (_, _, rate) in zip(rates, cases, strict=True)
        ]
        inputs = [
            _kernel_inputs(name, s[0], s[1:], g, lr, step)
            for (name, _, _), s, g, lr in zip(cases, state, grads, rates, strict=True)
        ]
        results = harness(inputs)
        for (name, settings, rate), s, g, lr, got in zip(cases, state, grads, rates, results, strict=True):
            want = _reference(name, s[0], s[1:], g, np.asarray(lr, rate), np.float64(step), settings)
            assert len(got) == len(want)
            for a, b in zip(got, want, strict=True):
                assert_same_values(a, b, f"{name} {settings} rate {rate} step {step}")
        state = results


@needs_compiler
@pytest.mark.parametrize("dtype", ["float32", "float64"])
def test_kernels_read_scalars_of_their_own_type_as_float64_ones(dtype, tmp_path):
    """A learning rate and step given as float32 (or an int64 step) reach the kernel as they
    are: its steps are bit for bit those of the kernel given the same values as float64."""
    rng, nptype = np.random.default_rng(8), NPTYPES[dtype]
    typed = [("float32", "float32"), ("float32", "int64"), ("float64", "int32")]
    adam = [elementwise_source.adam_update(dtype, 0.9, 0.999, 1e-7, True, s) for s in [("float64", "float64"), *typed]]
    adamw = [elementwise_source.adamw_update(dtype, 0.1, 0.9, 0.999, 1e-7, False, "float32", *s) for s in typed]
    sgd = [elementwise_source.sgd_momentum_update(dtype, 0.9, True, t) for t in ("float64", "float32")]
    sources = [*adam, *adamw, elementwise_source.adamw_update(dtype, 0.1, 0.9, 0.999, 1e-7, False, "float32"), *sgd]
    harness = Harness([(source, N) for source in sources], tmp_path)
    param, grad = rng.standard_normal(N).astype(nptype), rng.standard_normal(N).astype(nptype)
    m, v = np.abs(rng.standard_normal(N)).astype(nptype), np.abs(rng.standard_normal(N)).astype(nptype)
    lr, step = float(np.float32(0.01)), 7.0
    inputs = []
    for source in sources:
        scalars = [np.array([lr if n == "tf_lr" else step], t) for t, n, raw in source.inputs if raw]
        arrays = [param, m, v, grad] if len(scalars) == 2 else [param, m, grad]
        inputs.append([*arrays, *scalars])
    got = harness(inputs)
    for other in got[1:4]:
        for a, b in zip(other, got[0], strict=True):
            np.testing.assert_array_equal(a, b)
    for other in got[4:7]:
        for a, b in zip(other, got[7], strict=True):
            np.testing.assert_array_equal(a, b)
    for a, b in zip(got[9], got[8], strict=True):
        np.testing.assert_array_equal(a, b)


def test_on_a_gpu_each_step_is_one_generated_kernel_with_device_scalars(monkeypatch):
    """The GPU dispatch, the compiled kernel replaced by a recorder: float32 and float64
    parameters reach one generated kernel per variable, with the learning rate (and AdamW's
    step) the very 0-d device arrays given (no conversion before the launch: the kernel reads
    their type); float16 parameters run the reference."""
    calls = []

    def fake_elementwise(source):
        def kernel(*arrays):
            calls.append((source, arrays))
            return tuple(np.zeros_like(arrays[0]) for _ in source.outputs)

        return kernel

    dispatch_on_host(cupy_backend, monkeypatch)
    monkeypatch.setattr(cuda, "elementwise", fake_elementwise)
    for name, settings, _ in _cases():
        for dtype in ("float32", "float64", "float16"):
            calls.clear()
            x = np.full(5, 0.5, dtype)
            slots = [x.copy() for _ in range(_slots(name, settings))]
            lr, step = np.asarray(0.01, np.float32), np.asarray(3.0, np.float32)
            ins = (x, *slots, x, lr, step) if name == "adamw_update" else (x, slots[0], x, lr, *slots[1:])
            reference = get_op(name).reference
            kernel = get_op(name).bound_kernel("gpu", _attrs(name, settings))
            outs = kernel(*ins)
            if dtype == "float16":
                assert not calls
                for o, w in zip(outs, reference(*ins, **_attrs(name, settings)), strict=True):
                    np.testing.assert_array_equal(o, w)
                continue
            assert len(calls) == 1 and len(outs) == 1 + len(slots)
            source, arrays = calls[0]
            raw = [(t, a) for (t, _, is_raw), a in zip(source.inputs, arrays, strict=True) if is_raw]
            given = [lr, step] if name == "adamw_update" else [lr]
            assert len(raw) == len(given) and all(a is g for (_, a), g in zip(raw, given, strict=True))
            assert [t for t, _ in raw] == ["float32"] * len(given)
            assert source.in_params.startswith(f"{dtype} tf_param")


OPTIMIZERS = {
    "sgd-momentum": lambda: tp.optimizers.SGD(0.05, momentum=0.9),
    "sgd-nesterov": lambda: tp.optimizers.SGD(0.05, momentum=0.8, nesterov=True),
    "rmsprop": lambda: tp.optimizers.RMSprop(0.01),
    "rmsprop-momentum": lambda: tp.optimizers.RMSprop(0.01, momentum=0.5),
    "rmsprop-centered": lambda: tp.optimizers.RMSprop(0.01, centered=True),
    "rmsprop-momentum-centered": lambda: tp.optimizers.RMSprop(0.01, rho=0.8, momentum=0.3, centered=True),
    "adagrad": lambda: tp.optimizers.Adagrad(0.05),
    "adamw": lambda: tp.optimizers.AdamW(0.01, weight_decay=0.1),
}


def _steps(device: str, make, values, grads, frozen: bool):
    """Two updates of `values` by `grads` on `device`: (new values, slots, host reads made)."""
    with tp.device(device):
        variables = [tp.Variable(v, name=f"w{i}") for i, v in enumerate(values)]
        gradients = [tp.tensor(g) for g in grads]
        optimizer = make()
        optimizer.build(variables)

        @tp.function
        def step(lr, k, *grads):  # the gradients come in as inputs, as a train step's are made in it
            optimizer.apply_gradients_at(zip(grads, variables, strict=True), lr, k)

        HOST_READS.clear()
        for k in (1, 2):
            if frozen:
                step(tp.tensor(np.float32(optimizer.learning_rate)), tp.tensor(np.float32(k)), *gradients)
            else:
                optimizer.apply_gradients(zip(gradients, variables, strict=True))
        reads = sum(HOST_READS.values())
        slots = [s.numpy() for v in variables for s in optimizer.slots(v).values()]
    return [v.numpy() for v in variables], slots, reads


@pytest.mark.parametrize("frozen", [False, True], ids=["eager", "frozen"])
@pytest.mark.parametrize("name", sorted(OPTIMIZERS))
def test_each_optimizer_steps_on_an_accelerator_as_on_the_cpu(accelerator, name, frozen):
    """The stand-in GPU reads nothing back while it updates; its numbers are the CPU's (AdamW's
    to a few ulp: the CPU runs Adam's compiled kernel, the stand-in the reference)."""
    rng = np.random.default_rng(3)
    values = [rng.standard_normal((4, 3)).astype(np.float32), rng.standard_normal(3).astype(np.float32)]
    grads = [rng.standard_normal(v.shape).astype(np.float32) for v in values]
    cpu = _steps("cpu", OPTIMIZERS[name], values, grads, frozen)
    got = _steps(accelerator, OPTIMIZERS[name], values, grads, frozen)
    if accelerator.startswith("gpu") and not _compat.has_gpu:
        assert got[2] == 0
    exact = accelerator.startswith("gpu") and name != "adamw"
    for a, b in zip(got[0] + got[1], cpu[0] + cpu[1], strict=True):
        if exact:
            np.testing.assert_array_equal(a, b)
        else:
            np.testing.assert_allclose(a, b, rtol=1e-6, atol=1e-7)


@pytest.mark.skipif(not _compat.has_xla, reason="needs torch_xla (the .venv-xla test environment)")
@pytest.mark.parametrize(("name", "settings", "rate"), _cases(), ids=lambda v: str(v))
def test_each_step_is_lowered_to_xla_as_the_cpu_computes_it(name, settings, rate):
    """Every setting compiles to XLA with nothing run on the CPU, and gives the CPU's numbers."""
    metrics = pytest.importorskip("torch_xla.debug.metrics")
    rng = np.random.default_rng(4)
    param, grad = rng.standard_normal((3, 5)), rng.standard_normal((3, 5))
    slots = [0.5 + np.abs(rng.standard_normal((3, 5))) for _ in range(_slots(name, settings))]
    if name == "rmsprop_update" and settings[3]:  # the running mean of the gradients, below their root mean square
        slots[-1] = 0.1 * rng.standard_normal((3, 5))
    lr, step = np.asarray(0.01, rate), np.asarray(3.0)
    ins = (param, *slots, grad, lr, step) if name == "adamw_update" else (param, slots[0], grad, lr, *slots[1:])
    op, attrs = get_op(name), _attrs(name, settings)
    cpu = registry.apply(op, tuple(tp.tensor(a) for a in ins), attrs)
    metrics.clear_all()
    with tp.device("xla:0"):
        xla = registry.apply(op, tuple(tp.tensor(a, device="xla:0") for a in ins), attrs)
        xla = [x.numpy() for x in xla]
    assert metrics.executed_fallback_ops() == []
    for c, x in zip(cpu, xla, strict=True):
        np.testing.assert_allclose(x, c.numpy(), rtol=1e-12, atol=1e-15)
