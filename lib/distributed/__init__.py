"""Distributed training on Dask: `Cluster` starts or joins the worker processes, and a
`Strategy` trains a model on them through `model.fit(..., distribute=...)`:
`DataParallel` (synchronous, with backup workers, periodic checkpoints and recovery from
lost workers; `latest_checkpoint` finds the newest), `AsyncParameterServer`
(asynchronous) or `Pipeline` (model-parallel stages with pipelined micro-batches).
`run_placed` runs a graph whose nodes were placed with `tp.device("/worker:w")` on the
workers they name; `ShardedEmbedding` shards an embedding table by rows over the
workers and updates it sparsely. `tp.queue.FIFOQueue(..., cluster=cluster)` puts a queue
on a worker and gives a `RemoteQueue` proxy to it. docs/distributed.md tells the design.

Dask itself is imported only when a cluster is made, so `tapeflow.distributed` imports
without it (install `tapeflow[dist]`).

>>> import tapeflow as tp
>>> with tp.distributed.Cluster(n_workers=2) as cluster:  # doctest: +SKIP
...     model.fit(x, y, batch_size=64, distribute=tp.distributed.DataParallel(cluster, replicas=2))
"""

from tapeflow.distributed.asynchronous.parameter_server import AsyncParameterServer, AsyncStep
from tapeflow.distributed.checkpoints import latest_checkpoint
from tapeflow.distributed.parameters.sharded_embedding import ShardedEmbedding
from tapeflow.distributed.pipeline.pipeline import Pipeline, PipelineStep
from tapeflow.distributed.pipeline.placed_graph import run_placed
from tapeflow.distributed.queue import QueueActor, RemoteQueue
from tapeflow.distributed.runtime.cluster import Cluster
from tapeflow.distributed.strategy import Recovery, Strategy
from tapeflow.distributed.sync.data_parallel import DataParallel, StepRecord, WorkerAssignment

Placement = WorkerAssignment  # the name `strategy.placements` records went by first
