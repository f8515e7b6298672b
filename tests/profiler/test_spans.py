"""Named spans of the runtime (pushes, pulls, sends, receives, replica steps): what they
record, how they reach the Chrome trace and the summary, and that they cost nothing off."""

from __future__ import annotations

import numpy as np
import pytest

import tapeflow as tp
from tapeflow.graph.cost_model import CostModel, simulate
from tapeflow.ops.profiling import HOOKS
from tapeflow.profiler.recording import Profile, span


def test_a_span_records_its_bytes_and_args_in_order():
    sent = [np.zeros((3, 4), np.float32), np.zeros(5, np.float64)]
    with tp.profiler.trace() as profile:
        with span("push", sent, args={"replica": 1, "step": 7}):
            pass
        with span("pull") as pulled:
            pulled.moved((2, [np.zeros(10, np.float32)]))
            pulled.moved({"w": np.zeros(2, np.float32)})
        with span("replica_step", kind="phase"):
            tp.exp(tp.ones((2,)))
    push, pull, step = [e for e in profile.events if e.kind in ("comm", "phase")]
    assert (push.name, push.kind, push.output_bytes) == ("push", "comm", 48 + 40)
    assert push.args == {"bytes": 88, "replica": 1, "step": 7}
    assert (pull.name, pull.args) == ("pull", {"bytes": 48})
    assert step.kind == "phase" and step.start_ns <= next(e for e in profile.events if e.op == "exp").start_ns
    assert profile.started_ns <= push.start_ns <= push.end_ns <= pull.start_ns <= profile.stopped_ns


def test_spans_reach_the_chrome_trace_summary_and_timeline(tmp_path):
    with tp.profiler.trace(tmp_path) as profile:
        with span("send", [np.zeros(8, np.float32)], args={"to": "/worker:1/cpu:0"}):
            pass
    (event,) = [e for e in tp.profiler.read_chrome_trace(profile.trace_path)["traceEvents"] if e["name"] == "send"]
    assert event["cat"] == "comm" and event["args"]["bytes"] == 32 and event["args"]["to"] == "/worker:1/cpu:0"
    assert "send" in profile.summary() and "comm" in profile.summary()
    path = tp.profiler.plot_timeline(profile, tmp_path / "timeline.png")
    with open(path, "rb") as f:
        assert f.read(4) == b"\x89PNG"


def test_a_span_costs_nothing_when_profiling_is_off(monkeypatch):
    calls = []
    monkeypatch.setattr(Profile, "on_span", lambda *a: calls.append(a))
    assert HOOKS.span is None
    first = span("push", [np.zeros(4)])
    assert first is span("pull") is span("replica_step", kind="phase")  # one shared object, nothing recorded
    with first as s:
        s.moved([np.zeros(4)])
    assert calls == []
    with tp.profiler.trace():
        with span("push"):
            pass
    assert len(calls) == 1 and HOOKS.span is None


def test_refine_can_take_each_nodes_shortest_run():
    g = tp.freeze(lambda x: tp.tanh(tp.exp(x)), tp.TensorSpec((64, 64)))
    x = np.ones((64, 64), np.float32)
    g(x)
    with tp.profiler.trace() as profile:
        for _ in range(3):
            g(x)
    model = CostModel()
    runs: dict = {}
    for e in profile.events:
        if e.kind == "node":
            runs.setdefault(e.name, []).append(e.duration_ns / 1e9)
    shortest = simulate(g, model.refine(profile, g, statistic="min")).step_seconds
    assert shortest == pytest.approx(sum(min(r) for r in runs.values()), rel=1e-6)
    assert shortest <= simulate(g, model.refine(profile, g)).step_seconds * (1 + 1e-9)
    with pytest.raises(ValueError, match="statistic must be 'mean' or 'min'"):
        model.refine(profile, g, statistic="median")
