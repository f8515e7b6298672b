"""Distributed training on Dask: `Cluster` starts or joins the worker processes, and
`DataParallel` (synchronous, with periodic checkpoints and recovery from lost workers;
`latest_checkpoint` finds the newest), `AsyncParameterServer` (asynchronous) or
`Pipeline` (model-parallel stages with pipelined micro-batches) trains a model on them
through `model.fit(..., distribute=...)`; `run_placed` runs a graph whose nodes were
placed with `tp.device("/worker:w")` on the workers they name.

Dask itself is imported only when a cluster is made, so `tapeflow.distributed` imports
without it (install `tapeflow[dist]`).

>>> import tapeflow as tp
>>> with tp.distributed.Cluster(n_workers=2) as cluster:  # doctest: +SKIP
...     model.fit(x, y, batch_size=64, distribute=tp.distributed.DataParallel(cluster, replicas=2))
"""

from tapeflow.distributed.async_ps import AsyncParameterServer, AsyncStep
from tapeflow.distributed.checkpoints import latest_checkpoint
from tapeflow.distributed.cluster import Cluster
from tapeflow.distributed.data_parallel import DataParallel, Placement, Recovery, StepRecord
from tapeflow.distributed.pipeline import Pipeline, PipelineStep
from tapeflow.distributed.placed_graph import run_placed
