"""Tracing on a cluster: every worker records its part of each step (the graph nodes of
its replica or stage, and the runtime's spans: "replica_step", the compute of a replica's
step; "push" and "pull", a replica's parameter pushes and pulls; "send" and "recv", values
between pipeline stages; each with the bytes it moved), and the client merges the workers'
events into its own timeline, with each worker's clock mapped onto the client's.

Clocks: each process stamps events with its own monotonic counter. A worker reports the
pair (monotonic, wall) it read at one instant; the client measures the offset of the
worker's wall clock from its own with a round trip (the worker's reading against the
midpoint of the client's send and receive, the best of a few tries), so that a worker
event at monotonic time t lands on the client's axis at
t - worker_monotonic + worker_wall - offset - client_wall + client_monotonic.

>>> import tapeflow as tp
>>> with tp.distributed.Cluster(n_workers=1) as cluster:   # doctest: +SKIP
...     with tp.profiler.trace("logs", cluster=cluster) as profile:
...         model.fit(x, y, distribute=tp.distributed.DataParallel(cluster, replicas=1))
"""

from __future__ import annotations

import time

from tapeflow.profiler import recording
from tapeflow.profiler.recording import Event, Profile

ROUND_TRIPS = 5


def _worker_start() -> bool:
    """On a worker: start recording (a profile already recording there is kept)."""
    if recording.active() is None:
        recording.start()
        return True
    return False


def _worker_clock() -> tuple[int, int]:
    """On a worker: (monotonic ns, wall ns) read together."""
    return time.perf_counter_ns(), time.time_ns()


def _worker_stop() -> dict:
    """On a worker: stop recording and return its events as plain data with its clocks."""
    profile = recording.stop() if recording.active() is not None else None
    monotonic, wall = _worker_clock()
    events = [] if profile is None else profile.events
    return {
        "monotonic_ns": monotonic,
        "wall_ns": wall,
        "events": [
            (e.name, e.kind, e.op, e.start_ns, e.end_ns, e.thread, e.device, e.input_shapes, e.output_bytes, e.args)
            for e in events
        ],
    }


def wall_offsets(client, workers: list[str]) -> dict:
    """Each worker's wall clock minus the client's, in ns, from the best of a few round
    trips (the one with the shortest round trip bounds the error by half of it)."""
    best: dict = {w: (None, 0) for w in workers}
    for _ in range(ROUND_TRIPS):
        sent = time.time_ns()
        readings = client.run(_worker_clock, workers=workers)
        received = time.time_ns()
        trip = received - sent
        for worker, (_, wall) in readings.items():
            if best[worker][0] is None or trip < best[worker][0]:
                best[worker] = (trip, wall - (sent + received) // 2)
    return {w: offset for w, (_, offset) in best.items()}


class ClusterTrace:
    """The workers' side of a client's recording: `start` begins recording on every worker;
    `merge` stops them and adds their events to `profile`, on the client's clock, each
    marked with its worker's address."""

    def __init__(self, cluster, timeout: float = 30.0):
        self.cluster = cluster
        self.timeout = timeout
        self.workers: list[str] = []

    def start(self) -> None:
        client = self.cluster.client
        self.workers = self.cluster.workers
        self.offsets = wall_offsets(client, self.workers)
        client.run(_worker_start, workers=self.workers)

    def merge(self, profile: Profile) -> None:
        client = self.cluster.client
        now = set(self.cluster.workers)
        alive = [w for w in self.workers if w in now]  # a worker lost meanwhile took its events with it
        reports = client.run(_worker_stop, workers=alive) if alive else {}
        client_monotonic, client_wall = time.perf_counter_ns(), time.time_ns()
        for worker, report in reports.items():
            shift = report["wall_ns"] - report["monotonic_ns"] - self.offsets.get(worker, 0)
            shift += client_monotonic - client_wall
            for name, kind, op, start, end, thread, device, shapes, nbytes, args in report["events"]:
                event = Event(name, kind, op, start + shift, end + shift, thread, device, shapes, nbytes, worker, args)
                profile.add(event)
