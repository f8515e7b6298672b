"""Distributed training on Dask: `Cluster` starts or joins the worker processes, and
`DataParallel` trains a model on them through `model.fit(..., distribute=...)`, with
periodic checkpoints (`latest_checkpoint` finds the newest) and recovery from lost workers.

Dask itself is imported only when a cluster is made, so `tapeflow.distributed` imports
without it (install `tapeflow[dist]`).

>>> import tapeflow as tp
>>> with tp.distributed.Cluster(n_workers=2) as cluster:  # doctest: +SKIP
...     model.fit(x, y, batch_size=64, distribute=tp.distributed.DataParallel(cluster, replicas=2))
"""

from tapeflow.distributed.checkpoints import latest_checkpoint
from tapeflow.distributed.cluster import Cluster
from tapeflow.distributed.data_parallel import DataParallel, Placement, Recovery, StepRecord
