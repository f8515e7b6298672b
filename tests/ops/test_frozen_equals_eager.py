"""Frozen equals eager on hostile numbers, for every op and every graph pass.

Each op's sample inputs (from test_every_op) are salted with NaN, ±inf, ±0, subnormals and
values at the edges of float range. A small function runs the op and then the rewrites the
passes look for (``o + 0.0``, the same chain with the constants 0.0 and -0.0, a fusible
elementwise chain, a repeated subexpression, a constant subexpression). It runs eagerly, and
frozen: with no pass, with each pass alone and with all of them. Every run must give eager's
result: NaN where eager has NaN, infinities and zeros with their signs, other values within a
few ulp (up to flush-to-zero), integers and booleans exactly, or the same error.
"""

from __future__ import annotations

import zlib

import numpy as np
import pytest
from hostile import RTOL, edge_values, mismatches, salted
from test_every_op import SAMPLES, Case, _op_inputs

import tapeflow as tp
from tapeflow.graph import passes
from tapeflow.ops import registry

pytestmark = pytest.mark.filterwarnings("ignore::RuntimeWarning")

# Ops a generic function cannot call on placeholders: their attrs hold graphs or tensors
# built for one call, or their samples call a Python wrapper.
NOT_TRACEABLE = {"cond", "while_loop", "while_loop_grad", "custom_gradient"}
PASSES = {p.name: p for p in passes.DEFAULT_PASSES}


def _cases():
    """Every sample case of every op; the first of each op in `make test`, the rest marked slow."""
    for name in sorted(SAMPLES):
        op = registry.get_op(name)
        if name in NOT_TRACEABLE or op.stateful:
            continue
        cases = [c for c in SAMPLES[name] if c.call is None]
        for k, case in enumerate(cases):
            marks = [pytest.mark.slow] if k else []
            yield pytest.param(name, case, id=f"{name}-{case.name}", marks=marks)


def _probes(o: tp.Tensor) -> list:
    """The op's output, then values that exercise each pass on it."""
    if o.dtype.kind != "f":
        return [o]
    edges = edge_values(o.dtype.np)
    c = tp.constant(edges[:5])  # 0, -0, inf, -inf, nan: folded by `fold`
    folded = tp.sum(tp.exp(c) * 0.5 - c)
    dense = []
    if o.ndim == 2 and o.shape[1]:  # a bias and relu that `bias_activation_fusion` folds into the product
        w = tp.constant(np.ones((o.shape[1], 5), o.dtype.np))
        dense = [tp.nn.relu(tp.matmul(o, w) + tp.constant(edges[:5])), tp.matmul(o, w) + tp.constant(edges[5:10])]
    return [
        *dense,
        o,
        o + 0.0,  # not x: -0.0 + 0.0 is 0.0
        o - 0.0,
        tp.maximum(tp.tanh(o) * 2.0, 0.0) - o,  # fused, with the constant 0.0
        tp.maximum(tp.tanh(o) * 2.0, -0.0) - o,  # the same program with -0.0
        tp.minimum(tp.sigmoid(o), o) + tp.minimum(tp.sigmoid(o), o),  # merged by cse
        tp.exp(o) * tp.sqrt(tp.abs(o)) + folded,
    ]


def _function(op, case: Case):
    attrs = case.make_attrs()

    def fn(*tensors):
        out = registry.apply(op, tuple(_op_inputs(case, list(tensors))), attrs)
        outs = (out,) if op.num_outputs == 1 else tuple(out)
        return [p for o in outs for p in _probes(o)]

    return fn


def _salted_inputs(name, case: Case) -> list[np.ndarray]:
    rng = np.random.default_rng(zlib.crc32(name.encode()))
    out = []
    for a in case.inputs:
        a = np.asarray(a)
        out.append(salted(a, rng) if a.dtype.kind == "f" and a.ndim else a)
    return out


def _outcome(run):
    """(list of arrays, None) or (None, the error's type)."""
    try:
        return [np.asarray(r) for r in run()], None
    except (ValueError, TypeError, ArithmeticError, IndexError, RuntimeError) as exc:
        return None, type(exc)


def _differences(got, want, cancelling: bool = False) -> list[str]:
    """What differs between two outcomes. With `cancelling` (gradients such as 1 - tanh(x)**2,
    where a fused kernel's last-bit difference in tanh grows where the result is small), finite
    values also agree within the tolerance of the output's largest magnitude."""
    (outs, err), (ref, ref_err) = got, want
    if err is not None or ref_err is not None:
        return [] if err is ref_err or (err and ref_err and issubclass(err, ref_err)) else [f"{err} vs {ref_err}"]
    found = []
    for k, (a, e) in enumerate(zip(outs, ref, strict=True)):
        if a.shape != e.shape or a.dtype != e.dtype:
            found.append(f"output {k}: {a.dtype}{a.shape} vs {e.dtype}{e.shape}")
        elif e.dtype.kind == "f":
            rtol = RTOL.get(e.dtype, 1e-3) * 8
            bad = mismatches(a, e, e.dtype, rtol)
            if cancelling and bad.any():
                finite = np.isfinite(e)
                scale = float(np.abs(e[finite]).max()) if finite.any() else 0.0
                with np.errstate(invalid="ignore"):
                    bad &= ~(finite & np.isfinite(a) & (np.abs(a.astype(np.float64) - e) <= rtol * scale))
            if bad.any():
                i = tuple(np.argwhere(bad)[0])
                found.append(f"output {k}: {int(bad.sum())} values differ, e.g. {a[i]!r} vs {e[i]!r}")
        elif not np.array_equal(a, e):
            found.append(f"output {k}: {e.dtype} values differ")
    return found


def _specs(arrays):
    return [tp.TensorSpec(a.shape, a.dtype.name) for a in arrays]


def _graph_run(graph, arrays):
    return graph(*[tp.tensor(a) for a in arrays])


@pytest.mark.parametrize(("name", "case"), list(_cases()))
def test_frozen_equals_eager_on_hostile_numbers(name, case):
    op = registry.get_op(name)
    fn = _function(op, case)
    arrays = _salted_inputs(name, case)
    eager = _outcome(lambda: fn(*[tp.tensor(a) for a in arrays]))
    problems = {}
    for label in ["none", *PASSES, "all"]:
        try:
            graph = tp.freeze(fn, *_specs(arrays), optimize=False)
        except tp.FreezeError as exc:  # pragma: no cover - reported as a failure below
            problems[label] = [f"cannot freeze: {exc}"]
            break
        if label == "all":
            passes.optimize(graph)
        elif label != "none":
            PASSES[label].run(graph)
            graph.changed()
        found = _differences(_outcome(lambda g=graph: _graph_run(g, arrays)), eager)
        if found:
            problems[label] = found
    assert not problems, f"{name}: frozen differs from eager: {problems}"


def _gradient_function(op, case: Case):
    """The gradients of sum(output * cotangent) with respect to the float inputs."""
    attrs = case.make_attrs()
    floats = [i for i, a in enumerate(case.inputs) if np.asarray(a).dtype.kind == "f"]

    def fn(*tensors):
        with tp.GradientTape() as tape:
            sources = [tensors[i] for i in floats]
            tape.watch(sources)
            ins = tuple(_op_inputs(case, list(tensors)))
            out = registry.apply(op, ins, attrs)
            outs = (out,) if op.num_outputs == 1 else tuple(out)
            # a shape the rule leaves open (unique_sum's row count) gets a weighting that needs no size
            open_shape = [None in tuple(shape) for shape, _ in op.infer(*ins, **attrs)]
            loss = None
            for k, (o, unsized) in enumerate(zip(outs, open_shape, strict=True)):
                if o.dtype.kind != "f" or (case.used is not None and k not in case.used):
                    continue
                if unsized:
                    term = tp.sum(o * tp.sin(o))
                else:
                    weights = np.linspace(-1.0, 1.0, o.size or 1)[: o.size].reshape(o.shape)
                    term = tp.sum(o * tp.cast(tp.constant(weights), o.dtype))
                loss = term if loss is None else loss + term
        if loss is None:  # no float output (a cast to an integer): nothing to differentiate
            return [tp.zeros(())]
        return [g if g is not None else tp.zeros(()) for g in tape.gradient(loss, sources)]

    return fn


def _gradient_cases():
    for param in _cases():
        name, case = param.values
        op = registry.get_op(name)
        if op.differentiable and any(np.asarray(a).dtype.kind == "f" for a in case.inputs):
            yield param


@pytest.mark.parametrize(("name", "case"), list(_gradient_cases()))
def test_frozen_gradients_equal_eager_on_hostile_numbers(name, case):
    """The VJP graph of each op, optimized, gives eager's gradients on salted inputs."""
    op = registry.get_op(name)
    fn = _gradient_function(op, case)
    arrays = _salted_inputs(name, case)
    eager = _outcome(lambda: fn(*[tp.tensor(a) for a in arrays]))
    problems = {}
    for label in ["none", "all"]:
        graph = tp.freeze(fn, *_specs(arrays), optimize=label == "all")
        found = _differences(_outcome(lambda g=graph: _graph_run(g, arrays)), eager, cancelling=True)
        if found:
            problems[label] = found
    assert not problems, f"{name}: frozen gradients differ from eager: {problems}"
