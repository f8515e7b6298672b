"""Running a graph placed on worker devices on a Dask cluster, one partition set per worker.

A graph whose nodes were traced inside `tp.device("/worker:w...")` blocks (the rest is
placed by `tapeflow.graph.placer`) is partitioned, and each device's partitions go, as
graph-file bytes, to a `StageWorker` actor on the w-th worker of the cluster (workers
sorted by address); values cross between them worker to worker
(`tapeflow.distributed.pipeline.stages`). The inputs go only to the workers whose
partitions read them. State the graph writes is written in the workers' copies only.

>>> import tapeflow as tp
>>> def f(x):
...     with tp.device("/worker:0"):
...         h = tp.exp(x)
...     with tp.device("/worker:1"):
...         return h * 2.0
>>> graph = tp.freeze(f, tp.TensorSpec((3,)))
>>> with tp.distributed.Cluster(n_workers=2) as cluster:  # doctest: +SKIP
...     (y,) = run_placed(cluster, graph, np.zeros(3, np.float32))
"""

from __future__ import annotations

import numpy as np

from tapeflow.devices import WorkerDevice
from tapeflow.distributed.pipeline.compression import check_compression
from tapeflow.distributed.pipeline.stages import Roles, StageGroup, stage_specs
from tapeflow.graph.executor import check_feed
from tapeflow.graph.placer import place


def run_placed(cluster, graph, *inputs, compression: str | None = None, timeout: float = 60.0) -> list[np.ndarray]:
    """The outputs of `graph` on `inputs` (one array per graph input), with each partition
    run on the worker its devices name (see the module docstring); every wait is bounded
    by `timeout` seconds, and a worker that leaves is a RuntimeError naming it."""
    check_compression(compression, "run_placed")
    if len(inputs) != len(graph.inputs):
        raise ValueError(f"run_placed: {graph.name} takes {len(graph.inputs)} inputs, got {len(inputs)}")
    feeds = {v.name: check_feed(graph.name, v, a) for v, a in zip(graph.inputs, inputs, strict=True)}
    place(graph)
    devices = list(dict.fromkeys(n.device for n in graph.nodes))
    workers = cluster.workers
    owners = {d: WorkerDevice.parse(d).worker for d in devices}
    missing = sorted(d for d, w in owners.items() if w >= len(workers))
    if missing:
        raise ValueError(f"run_placed: {graph.name} uses devices {missing}, but the cluster has {len(workers)} workers")
    roles = Roles(outputs=tuple(range(len(graph.outputs))))
    specs = stage_specs({None: graph}, devices, roles, compression, timeout)
    group = StageGroup(cluster, specs, [workers[owners[d]] for d in devices], feeds, timeout)
    try:
        try:
            answers = group.step(0, [None], 0)
        except Exception as error:
            failure = group.failure(error, f"a run of {graph.name}")
            if failure is error:
                raise
            raise RuntimeError(f"run_placed: {failure}") from error
    finally:
        group.close()
    given = {**feeds, **{v.name: v.data for v in graph.constants}}
    return [answers.outputs[v.name] if v.name in answers.outputs else given[v.name] for v in graph.outputs]
