"""Recording a timeline: every eager op, every graph node the executor runs, named
phases (`fit`'s data, step and callbacks) and the distributed runtime's spans (parameter
pushes and pulls, sends and receives between stages, a replica's step, each with the bytes
it moved), each an event with its start, duration, thread and device, its input shapes
and output bytes.

>>> import tapeflow as tp
>>> with tp.profiler.trace() as profile:
...     y = tp.ones((2, 3)) * 2.0
>>> [e.op for e in profile.events if e.kind == "op"][-1]
'multiply'
"""

from __future__ import annotations

import contextlib
import os
import threading
import time
from dataclasses import dataclass, field

from tapeflow.ops.profiling import HOOKS
from tapeflow.profiler.report import summary, write_chrome_trace


@dataclass
class Event:
    """One span of the timeline (times in nanoseconds of `time.perf_counter_ns`)."""

    name: str
    kind: str  # "op" (eager), "node" (graph), "phase" (fit's data/step/callbacks, or the user's), "comm" (transfers)
    op: str
    start_ns: int
    end_ns: int
    thread: int
    device: str = ""
    input_shapes: list = field(default_factory=list)
    output_bytes: int = 0
    process: str = ""  # the worker that recorded it ("" for this process)
    args: dict = field(default_factory=dict)  # what a span adds: the bytes it moved, its peer

    @property
    def duration_ns(self) -> int:
        return self.end_ns - self.start_ns


def _shape(value) -> list:
    shape = getattr(value, "shape", None)
    return [None if d is None else int(d) for d in shape] if shape is not None else []


def _nbytes(value) -> int:
    if isinstance(value, tuple | list):
        return sum(_nbytes(v) for v in value)
    if isinstance(value, dict):
        return sum(_nbytes(v) for v in value.values())
    n = getattr(value, "nbytes", None)
    if n is None:
        inner = getattr(value, "_value", None)
        n = getattr(inner, "nbytes", 0)
    return int(n or 0)


class Profile:
    """The events of one recording; see `tapeflow.profiler.summary` and `write_chrome_trace`
    for what can be done with them."""

    def __init__(self, logdir: str | None = None):
        self.logdir = None if logdir is None else os.fspath(logdir)
        self.events: list[Event] = []
        self.started_ns = time.perf_counter_ns()
        self.wall_started = time.time()
        self.stopped_ns: int | None = None
        self.workers = None  # the cluster's tracer, when the workers record too

    def add(self, event: Event) -> None:
        self.events.append(event)  # list.append is atomic: threads record side by side

    def on_op(self, op_name, inputs, outputs, device, start_ns) -> None:
        end = time.perf_counter_ns()
        self.add(
            Event(
                op_name,
                "op",
                op_name,
                start_ns,
                end,
                threading.get_ident(),
                str(device),
                [_shape(t) for t in inputs],
                sum(_nbytes(o) for o in outputs),
            )
        )

    def on_node(self, graph, node, arrays, result, start_ns) -> None:
        end = time.perf_counter_ns()
        self.add(
            Event(
                node.name,
                "node",
                node.op,
                start_ns,
                end,
                threading.get_ident(),
                str(graph.node_device(node) or graph.device),
                [_shape(a) for a in arrays],
                _nbytes(result),
            )
        )

    def on_span(self, name, kind, start_ns, payload, args) -> None:
        end = time.perf_counter_ns()
        nbytes = _nbytes(payload)
        self.add(
            Event(name, kind, name, start_ns, end, threading.get_ident(), "", [], nbytes, "", {"bytes": nbytes, **args})
        )

    def summary(self, sort_by: str = "self_time", limit: int | None = None) -> str:
        """A table of time per op (see `tapeflow.profiler.summary`)."""
        return summary(self, sort_by=sort_by, limit=limit)

    def __repr__(self) -> str:
        return f"<Profile {len(self.events)} events>"


_ACTIVE: Profile | None = None
_SWITCH = threading.Lock()


def active() -> Profile | None:
    """The profile being recorded, or None."""
    return _ACTIVE


def start(logdir=None, cluster=None) -> Profile:
    """Start recording every op, graph node and phase of this process (and, with a
    `tapeflow.distributed.Cluster`, of each of its workers); returns the profile. With
    `logdir`, `stop` writes a Chrome trace there."""
    global _ACTIVE
    workers = None
    if cluster is not None:
        tracer = getattr(cluster, "tracer", None)
        if not callable(tracer):
            raise TypeError(f"tapeflow.profiler.start: cluster must be a tapeflow.distributed.Cluster, got {cluster!r}")
        workers = tracer()
    with _SWITCH:
        if _ACTIVE is not None:
            raise RuntimeError("tapeflow.profiler.start: a profile is already being recorded; stop it first")
        profile = Profile(logdir)
        profile.workers = workers
        _ACTIVE = profile
        HOOKS.op, HOOKS.node, HOOKS.span = profile.on_op, profile.on_node, profile.on_span
    if workers is not None:
        try:
            workers.start()
        except BaseException:
            stop()
            raise
    return profile


def stop() -> Profile:
    """Stop recording; write the Chrome trace to the logdir given to `start` (if any) and
    return the profile."""
    global _ACTIVE
    with _SWITCH:
        profile = _ACTIVE
        if profile is None:
            raise RuntimeError("tapeflow.profiler.stop: no profile is being recorded")
        HOOKS.op = HOOKS.node = HOOKS.span = None
        _ACTIVE = None
        profile.stopped_ns = time.perf_counter_ns()
    if profile.workers is not None and profile.workers.workers:
        profile.workers.merge(profile)
    if profile.logdir is not None:
        profile.trace_path = write_chrome_trace(profile, profile.logdir)
    return profile


@contextlib.contextmanager
def trace(logdir=None, cluster=None):
    """Record the block: `with tp.profiler.trace("logs") as profile: model.fit(...)` (with
    `cluster=`, the workers' parts of it too)."""
    profile = start(logdir, cluster)
    try:
        yield profile
    finally:
        stop()


class phase:
    """A named span of the timeline (as `fit` marks "data", "step" and "callbacks"); it
    records nothing unless a profile is being recorded.

    >>> with phase("load"):
    ...     pass
    """

    __slots__ = ("name", "_profile", "_start")

    def __init__(self, name: str):
        self.name = name

    def __enter__(self):
        self._profile = _ACTIVE
        if self._profile is not None:
            self._start = time.perf_counter_ns()
        return self

    def __exit__(self, *exc):
        if self._profile is not None:
            end = time.perf_counter_ns()
            self._profile.add(Event(self.name, "phase", self.name, self._start, end, threading.get_ident()))


def timed_batches(batches):
    """`batches` with the time spent fetching each recorded as a "data" phase while a
    profile is being recorded (and `batches` itself otherwise)."""
    if _ACTIVE is None:
        return batches
    return _timed(iter(batches))


def _timed(iterator):
    while True:
        start = time.perf_counter_ns()
        try:
            item = next(iterator)
        except StopIteration:
            return
        profile = _ACTIVE
        if profile is not None:
            profile.add(Event("data", "phase", "data", start, time.perf_counter_ns(), threading.get_ident()))
        yield item


class _Span:
    """A span being recorded (see `span`)."""

    __slots__ = ("_observer", "name", "kind", "payload", "args", "_start")

    def __init__(self, observer, name: str, kind: str, payload, args):
        self._observer, self.name, self.kind, self.payload, self.args = observer, name, kind, payload, args

    def __enter__(self):
        self._start = time.perf_counter_ns()
        return self

    def __exit__(self, *exc):
        self._observer(self.name, self.kind, self._start, self.payload, self.args or {})

    def moved(self, payload) -> None:
        """Count the bytes of `payload` (arrays, nested in lists, tuples or dicts) as moved by the span."""
        self.payload = payload if self.payload is None else (self.payload, payload)


class _NoSpan:
    """What `span` gives while nothing is recorded: it does nothing."""

    __slots__ = ()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        return None

    def moved(self, payload) -> None:
        return None


_NO_SPAN = _NoSpan()


def span(name: str, payload=None, kind: str = "comm", args: dict | None = None):
    """A named span of the timeline with the bytes it moved: `payload` (arrays, nested in
    lists, tuples or dicts) and whatever `moved` adds inside the block; `args` go into the
    trace beside the bytes. While no profile is recorded it is one shared object that does
    nothing, so the runtime can mark its pushes, pulls, sends and receives at no cost.

    >>> import numpy as np, tapeflow as tp
    >>> with tp.profiler.trace() as profile:
    ...     with span("push", [np.zeros(4, np.float32)], args={"shard": 0}) as s:
    ...         s.moved(np.zeros(2, np.float64))
    >>> [(e.name, e.kind, e.args) for e in profile.events]
    [('push', 'comm', {'bytes': 32, 'shard': 0})]
    >>> span("pull") is span("push")  # nothing is being recorded
    True
    """
    observer = HOOKS.span
    if observer is None:
        return _NO_SPAN
    return _Span(observer, name, kind, payload, args)
