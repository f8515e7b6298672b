"""tp.function: one trace per signature, retrace reasons, input signatures, methods,
and the switch that runs functions eagerly."""

from __future__ import annotations

import logging
import threading

import numpy as np
import pytest

import tapeflow as tp


def test_traces_once_per_signature_and_says_why_it_retraced(caplog):
    traced = []

    @tp.function
    def scale(x, factor):
        traced.append(factor)
        return x * factor

    x2, x3 = tp.ones((2,)), tp.ones((3,))
    with caplog.at_level(logging.WARNING, logger="tapeflow.function"):
        for _ in range(3):
            np.testing.assert_array_equal(scale(x2, 2.0).numpy(), [2.0, 2.0])
        assert scale.trace_count == 1 and traced == [2.0]
        scale(x3, 2.0)
        scale(x3, 5.0)
        scale(np.ones((3,), np.float64), 5.0)
    assert scale.trace_count == 4 and len(scale.graphs) == 4
    assert scale.retrace_reasons == [
        "argument 'x' changed from float32[2] to float32[3]",
        "argument 'factor' changed from 2.0 to 5.0",
        "argument 'x' changed from float32[3] to float64[3]",
    ]
    assert [r.getMessage().split("because ")[1] for r in caplog.records] == scale.retrace_reasons


def test_input_signature_serves_every_batch_size():
    w = tp.Variable(np.arange(6, dtype=np.float32).reshape(3, 2), name="w")

    @tp.function(input_signature=[tp.TensorSpec((None, 3))])
    def project(x):
        return x @ w

    for n in (1, 4, 7):
        x = np.random.default_rng(n).standard_normal((n, 3)).astype(np.float32)
        np.testing.assert_allclose(project(x).numpy(), x @ w.numpy(), rtol=1e-6)
    assert project.trace_count == 1
    with pytest.raises(ValueError, match=r"argument 'x' has shape \(2, 4\).*input_signature"):
        project(np.ones((2, 4), np.float32))


def test_variables_are_state_not_constants():
    v = tp.Variable([1.0, 2.0], name="v")

    @tp.function
    def bump(x):
        v.assign_add(x)
        return v * 2.0

    np.testing.assert_array_equal(bump(tp.ones((2,))).numpy(), [4.0, 6.0])
    np.testing.assert_array_equal(bump(tp.ones((2,))).numpy(), [6.0, 8.0])
    v.assign([0.0, 0.0])  # an eager write is seen by the next run
    np.testing.assert_array_equal(bump(tp.ones((2,))).numpy(), [2.0, 2.0])
    assert bump.trace_count == 1


def test_methods_trace_per_instance():
    class Scaler:
        def __init__(self, k):
            self.k = tp.Variable(k, name="k")

        @tp.function
        def __call__(self, x):
            return x * self.k

    a, b = Scaler(2.0), Scaler(3.0)
    assert a(tp.ones(())).item() == 2.0 and b(tp.ones(())).item() == 3.0


def test_run_functions_eagerly_skips_tracing():
    seen = []

    @tp.function
    def f(x):
        seen.append(type(x).__name__)
        return x + 1.0

    tp.config.run_functions_eagerly(True)
    try:
        assert f(tp.ones(())).item() == 2.0 and f(tp.ones(())).item() == 2.0
    finally:
        tp.config.run_functions_eagerly(False)
    assert seen == ["Tensor", "Tensor"] and f.trace_count == 0
    f(tp.ones(()))
    assert seen[-1] == "TracedTensor" and f.trace_count == 1


def test_nested_structures_and_keyword_arguments():
    @tp.function
    def combine(pair, scale=1.0, *, offset):
        a, b = pair
        return {"sum": (a + b) * scale + offset, "diff": a - b}

    out = combine((tp.ones((2,)), tp.zeros((2,))), 3.0, offset=tp.ones((2,)))
    np.testing.assert_array_equal(out["sum"].numpy(), [4.0, 4.0])
    np.testing.assert_array_equal(out["diff"].numpy(), [1.0, 1.0])


@pytest.mark.timeout(60)
def test_a_function_that_calls_itself_inlines_the_inner_calls_instead_of_hanging():
    @tp.function
    def power(x, n):
        return x if n == 1 else x * power(x, n - 1)

    x = tp.constant([2.0, 3.0])
    out = {}
    worker = threading.Thread(target=lambda: out.setdefault("y", power(x, 3)), daemon=True)
    worker.start()
    worker.join(30)
    assert not worker.is_alive(), "the recursive call deadlocked"
    assert out["y"].numpy().tolist() == [8.0, 27.0]
    assert power.trace_count == 1
    assert power(x, 3).numpy().tolist() == [8.0, 27.0] and power.trace_count == 1
