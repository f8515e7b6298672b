"""The profiler: what it records (eager ops, graph nodes, fit's phases, threads), what it
writes (Chrome trace, summary table, PNG), and that it costs nothing when off."""

from __future__ import annotations

import glob
import json
import os
import threading

import numpy as np
import pytest

import tapeflow as tp
from tapeflow.ops.profiling import HOOKS
from tapeflow.profiler.recording import Event, Profile
from tapeflow.profiler.report import self_times


def _model():
    model = tp.Sequential([tp.layers.Input((4,)), tp.layers.Dense(8, activation="relu"), tp.layers.Dense(1)])
    model.compile(optimizer="sgd", loss="mse")
    return model


def _data(n=64):
    rng = np.random.default_rng(0)
    return rng.normal(size=(n, 4)).astype(np.float32), rng.normal(size=(n, 1)).astype(np.float32)


def test_eager_ops_are_recorded_with_shapes_bytes_device_and_thread():
    a = tp.ones((3, 4))
    with tp.profiler.trace() as profile:
        b = tp.matmul(a, tp.ones((4, 5)))
    (event,) = [e for e in profile.events if e.op == "matmul"]
    assert event.kind == "op" and event.input_shapes == [[3, 4], [4, 5]]
    assert event.output_bytes == b.numpy().nbytes == 60
    assert event.device == str(a.device) and event.thread == threading.get_ident()
    assert 0 < event.duration_ns and profile.started_ns <= event.start_ns <= event.end_ns <= profile.stopped_ns


def test_graph_nodes_are_recorded_per_run():
    f = tp.function(lambda x: tp.exp(x) * 2.0)
    x = tp.ones((2, 3))
    f(x)  # traced before the recording
    with tp.profiler.trace() as profile:
        f(x)
        f(x)
    nodes = [e for e in profile.events if e.kind == "node"]
    assert nodes and {e.op for e in nodes} <= {"exp", "multiply", "fused_elementwise"}
    assert len(nodes) % 2 == 0 and all(e.input_shapes[0] == [2, 3] for e in nodes)
    assert all(e.output_bytes == 24 for e in nodes)


def test_fit_records_its_data_step_and_callback_phases():
    model, (x, y) = _model(), _data()
    model.fit(x, y, batch_size=16, epochs=1, verbose=0)
    with tp.profiler.trace() as profile:
        model.fit(x, y, batch_size=16, epochs=1, verbose=0)
    phases = [e.op for e in profile.events if e.kind == "phase"]
    assert phases.count("step") == 4 and phases.count("data") == 4 and phases.count("callbacks") == 8
    steps = [e for e in profile.events if e.op == "step"]
    nodes = [e for e in profile.events if e.kind == "node"]
    assert all(any(s.start_ns <= n.start_ns and n.end_ns <= s.end_ns for s in steps) for n in nodes)


def test_self_time_excludes_the_spans_inside():
    events = [
        Event("step", "phase", "step", 0, 100, 1),
        Event("a", "op", "a", 10, 30, 1),
        Event("b", "op", "b", 40, 90, 1),
        Event("c", "op", "c", 50, 60, 2),  # another thread: not inside the step
    ]
    assert self_times(events) == [30, 20, 50, 10]


def test_summary_table_sorts_and_refuses_unknown_keys():
    profile = Profile()
    profile.events = [
        Event("step", "phase", "step", 0, 100, 1),
        Event("a", "op", "matmul", 10, 30, 1),
        Event("a", "op", "matmul", 30, 50, 1),
        Event("b", "op", "exp", 60, 90, 1),
    ]
    lines = profile.summary().splitlines()
    assert lines[0].split() == ["op", "kind", "calls", "total_ms", "self_ms", "self_%", "mean_us"]
    assert [line.split()[0] for line in lines[1:]] == ["matmul", "step", "exp"]
    assert lines[1].split()[2] == "2"
    assert [line.split()[0] for line in profile.summary(sort_by="calls").splitlines()[1:2]] == ["matmul"]
    with pytest.raises(ValueError, match="sort_by must be one of"):
        profile.summary(sort_by="speed")


def test_chrome_trace_file_round_trips(tmp_path):
    with tp.profiler.trace(tmp_path) as profile:
        tp.exp(tp.ones((5,)))
    (path,) = glob.glob(str(tmp_path / "*.trace.json"))
    assert profile.trace_path == path
    data = tp.profiler.read_chrome_trace(path)
    complete = [e for e in data["traceEvents"] if e["ph"] == "X"]
    assert any(e["name"] == "exp" and e["cat"] == "op" for e in complete)
    for e in complete:
        assert set(e) == {"name", "cat", "ph", "ts", "dur", "pid", "tid", "args"}
        assert e["dur"] >= 0 and e["ts"] >= 0
        assert set(e["args"]) == {"op", "device", "input_shapes", "output_bytes"}
    meta = [e for e in data["traceEvents"] if e["ph"] == "M"]
    assert meta == [{"name": "process_name", "ph": "M", "pid": 0, "tid": 0, "args": {"name": "client"}}]
    bad = tmp_path / "bad.json"
    bad.write_text(json.dumps([1, 2]))
    with pytest.raises(ValueError, match="not a Chrome trace"):
        tp.profiler.read_chrome_trace(bad)


def test_threads_get_their_own_rows():
    both = threading.Barrier(2, timeout=10)

    def work():
        tp.exp(tp.ones((3,)))
        both.wait()  # both threads alive at once, so their identities differ

    with tp.profiler.trace() as profile:
        threads = [threading.Thread(target=work) for _ in range(2)]
        for t in threads:
            t.start()
        for t in threads:
            t.join(10)
    assert len({e.thread for e in profile.events if e.op == "exp"}) == 2


def test_nothing_is_observed_when_profiling_is_off(monkeypatch):
    calls = []
    monkeypatch.setattr(Profile, "on_op", lambda *a: calls.append("op"))
    monkeypatch.setattr(Profile, "on_node", lambda *a: calls.append("node"))
    assert HOOKS.op is None and HOOKS.node is None and tp.profiler.active() is None
    model, (x, y) = _model(), _data()
    model.fit(x, y, batch_size=16, epochs=1, verbose=0)
    tp.function(lambda v: tp.exp(v))(tp.ones((2,)))
    assert calls == []
    with tp.profiler.trace():
        tp.exp(tp.ones((2,)))
    assert calls == ["op"] and HOOKS.op is None and HOOKS.node is None


def test_start_and_stop_refuse_misuse():
    with tp.profiler.trace():
        with pytest.raises(RuntimeError, match="already being recorded"):
            tp.profiler.start()
    with pytest.raises(RuntimeError, match="no profile is being recorded"):
        tp.profiler.stop()


def test_the_timeline_png(tmp_path):
    model, (x, y) = _model(), _data()
    with tp.profiler.trace() as profile:
        model.fit(x, y, batch_size=16, epochs=1, verbose=0)
    path = tp.profiler.plot_timeline(profile, tmp_path / "timeline.png")
    with open(path, "rb") as f:
        assert f.read(8) == b"\x89PNG\r\n\x1a\n"


def test_tensorboard_profile_batch_writes_a_trace_of_those_batches(tmp_path):
    model, (x, y) = _model(), _data(128)
    board = tp.callbacks.TensorBoard(tmp_path, profile_batch=(2, 3), write_graph=False)
    model.fit(x, y, batch_size=16, epochs=1, verbose=0, callbacks=[board])
    (path,) = glob.glob(os.path.join(tmp_path, "train", "plugins", "profile", "*", "*.trace.json"))
    events = tp.profiler.read_chrome_trace(path)["traceEvents"]
    assert sum(e["name"] == "step" for e in events) == 2
    assert tp.profiler.active() is None


@pytest.mark.parametrize("value", [-1, (3, 2), (0, 2), "a,b", (1, 2, 3), 1.5])
def test_tensorboard_refuses_a_bad_profile_batch(value):
    with pytest.raises(ValueError, match="profile_batch must be"):
        tp.callbacks.TensorBoard("logs", profile_batch=value)
