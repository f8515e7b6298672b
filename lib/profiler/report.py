"""What a recorded profile becomes: a table of time per op, a Chrome trace (JSON that
Perfetto and chrome://tracing open), and a PNG of the timeline.

>>> import os, tempfile, tapeflow as tp
>>> with tp.profiler.trace() as profile:
...     _ = tp.exp(tp.ones((100,)))
>>> print(summary(profile, limit=1).splitlines()[0].split())
['op', 'kind', 'calls', 'total_ms', 'self_ms', 'self_%', 'mean_us']
>>> path = write_chrome_trace(profile, tempfile.mkdtemp())
>>> any(e["name"] == "exp" for e in read_chrome_trace(path)["traceEvents"])
True
"""

from __future__ import annotations

import json
import os
import socket
from collections import defaultdict

from tapeflow.files.atomic import atomic_file

SORT_KEYS = ("self_time", "total_time", "calls", "name")


def self_times(events: list) -> list[int]:
    """Each event's duration less the durations of the events directly inside it on the
    same thread and process (a phase holds the ops it ran)."""
    own = [e.duration_ns for e in events]
    by_thread: dict = defaultdict(list)
    for i, e in enumerate(events):
        by_thread[(e.process, e.thread)].append(i)
    for indices in by_thread.values():
        indices.sort(key=lambda i: (events[i].start_ns, -events[i].end_ns))
        stack: list[int] = []
        for i in indices:
            while stack and events[stack[-1]].end_ns <= events[i].start_ns:
                stack.pop()
            if stack and events[i].end_ns <= events[stack[-1]].end_ns:
                own[stack[-1]] -= events[i].duration_ns
            stack.append(i)
    return own


def summary(profile, sort_by: str = "self_time", limit: int | None = None) -> str:
    """A table with a row per (op, kind): calls, total and self time, share of all self
    time, and mean time per call, sorted by `sort_by` (one of SORT_KEYS)."""
    if sort_by not in SORT_KEYS:
        raise ValueError(f"profiler.summary: sort_by must be one of {SORT_KEYS}, got {sort_by!r}")
    rows: dict = defaultdict(lambda: [0, 0, 0])
    for e, own in zip(profile.events, self_times(profile.events), strict=True):
        row = rows[(e.op, e.kind)]
        row[0] += 1
        row[1] += e.duration_ns
        row[2] += own
    total_self = sum(r[2] for r in rows.values()) or 1
    key = {
        "self_time": lambda kv: -kv[1][2],
        "total_time": lambda kv: -kv[1][1],
        "calls": lambda kv: -kv[1][0],
        "name": lambda kv: kv[0],
    }[sort_by]
    ordered = sorted(rows.items(), key=key)[:limit]
    width = max([len("op"), *(len(op) for (op, _), _ in ordered)])
    lines = [
        f"{'op':<{width}}  {'kind':<5}  {'calls':>7}  {'total_ms':>9}  {'self_ms':>9}  {'self_%':>6}  {'mean_us':>9}"
    ]
    for (op, kind), (calls, total, own) in ordered:
        lines.append(
            f"{op:<{width}}  {kind:<5}  {calls:>7}  {total / 1e6:>9.3f}  {own / 1e6:>9.3f}  "
            f"{100.0 * own / total_self:>6.1f}  {total / calls / 1e3:>9.1f}"
        )
    return "\n".join(lines)


def chrome_trace(profile) -> dict:
    """The profile as a Chrome trace object: complete ("X") events in microseconds from the
    start of the recording, one trace process per tapeflow process (the client and each
    worker), named by metadata events."""
    processes = sorted({e.process for e in profile.events})
    pid = {p: i for i, p in enumerate(processes)}
    trace_events = [
        {"name": "process_name", "ph": "M", "pid": pid[p], "tid": 0, "args": {"name": p or "client"}} for p in processes
    ]
    for e in profile.events:
        trace_events.append(
            {
                "name": e.name,
                "cat": e.kind,
                "ph": "X",
                "ts": (e.start_ns - profile.started_ns) / 1e3,
                "dur": e.duration_ns / 1e3,
                "pid": pid[e.process],
                "tid": e.thread,
                "args": {
                    "op": e.op,
                    "device": e.device,
                    "input_shapes": e.input_shapes,
                    "output_bytes": e.output_bytes,
                    **e.args,
                },
            }
        )
    return {
        "traceEvents": trace_events,
        "displayTimeUnit": "ms",
        "otherData": {"producer": "tapeflow", "host": socket.gethostname(), "wall_start": profile.wall_started},
    }


def write_chrome_trace(profile, logdir) -> str:
    """Write the profile to `<logdir>/<host>.<pid>.trace.json` (atomically); return the path."""
    logdir = os.fspath(logdir)
    os.makedirs(logdir, exist_ok=True)
    path = os.path.join(logdir, f"{socket.gethostname()}.{os.getpid()}.trace.json")
    with atomic_file(path) as tmp, open(tmp, "w") as f:
        json.dump(chrome_trace(profile), f)
    return path


def read_chrome_trace(path) -> dict:
    """A Chrome trace file written by `write_chrome_trace`, as a dict."""
    with open(path) as f:
        data = json.load(f)
    if not isinstance(data, dict) or not isinstance(data.get("traceEvents"), list):
        raise ValueError(f"{path}: not a Chrome trace (no traceEvents list)")
    return data


def plot_timeline(profile, path, max_events: int = 20000) -> str:
    """Draw the timeline to a PNG at `path`: a row per (process, thread), a bar per event,
    coloured by kind (phases behind, then transfers, ops and graph nodes in front). Needs matplotlib."""
    # lazily: matplotlib is an optional extra, needed only to draw
    import matplotlib

    matplotlib.use("Agg", force=False)
    # lazily: as above
    import matplotlib.pyplot as plt

    events = sorted(profile.events, key=lambda e: e.start_ns)[:max_events]
    lanes = sorted({(e.process, e.thread) for e in events})
    row = {lane: i for i, lane in enumerate(lanes)}
    colours = {"phase": "#c9d7e8", "op": "#e4572e", "node": "#17bebb", "comm": "#f0a202"}
    fig, ax = plt.subplots(figsize=(12, 1.2 + 0.6 * max(len(lanes), 1)))
    for kind, height in (("phase", 0.8), ("comm", 0.65), ("node", 0.5), ("op", 0.5)):
        spans = [e for e in events if e.kind == kind]
        for lane in lanes:
            bars = [
                ((e.start_ns - profile.started_ns) / 1e6, max(e.duration_ns / 1e6, 1e-3))
                for e in spans
                if (e.process, e.thread) == lane
            ]
            if bars:
                ax.broken_barh(bars, (row[lane] - height / 2, height), facecolors=colours[kind], label=kind)
    handles, labels = ax.get_legend_handles_labels()
    unique = dict(zip(labels, handles, strict=True))
    ax.legend(unique.values(), unique.keys(), loc="upper right")
    ax.set_yticks(range(len(lanes)), [f"{p or 'client'} / thread {i}" for i, (p, _) in enumerate(lanes)])
    ax.set_xlabel("time since the start of the recording (ms)")
    ax.set_title("tapeflow timeline")
    fig.tight_layout()
    path = os.fspath(path)
    with atomic_file(path) as tmp:
        fig.savefig(tmp, format="png", dpi=100)
    plt.close(fig)
    return path
