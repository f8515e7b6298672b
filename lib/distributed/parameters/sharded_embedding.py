"""`ShardedEmbedding`: an embedding table cut by rows over parameter-server shards, one
`EmbeddingShard` actor per worker, with lookups and sparse updates that move only the
rows a batch names (the TensorFlow paper's sharded embeddings, OSDI 2016 section 4.2).

A step pulls the batch's unique ids' rows, differentiates the loss with respect to that
small Variable of rows, and pushes the gradient's rows to the shards owning them, which
apply them with the optimizer's row update: the bytes moved grow with the batch's unique
ids and the embedding width, never with the table's rows. Optimizers that need the whole
table (global `weight_decay`, gradient-norm clipping, their own `update_step`) are refused.

>>> import numpy as np
>>> import tapeflow as tp
>>> with tp.distributed.Cluster(n_workers=2) as cluster:  # doctest: +SKIP
...     table = tp.distributed.ShardedEmbedding(cluster, np.zeros((10**6, 8), np.float32), tp.optimizers.SGD(0.1))
...     unique, inverse, rows = table.pull(np.array([[3, 900_000], [3, 7]]))
...     rows_var = tp.Variable(rows)
...     with tp.GradientTape() as tape:
...         loss = tp.sum(tp.nn.embedding_lookup(rows_var, inverse))
...     table.push(unique, tape.gradient(loss, rows_var), step=1)
"""

from __future__ import annotations

import concurrent.futures

import numpy as np

from tapeflow import optimizers
from tapeflow.distributed.parameters.embedding_shard import EmbeddingShard
from tapeflow.distributed.parameters.variable_blocks import split_variables
from tapeflow.ops import sparse
from tapeflow.tensor import IndexedSlices


class ShardedEmbedding:
    """A `rows x width` table (`table`, a 2-D array) sharded by rows over the workers of
    `cluster`, updated by a copy of `optimizer` on each shard; `timeout` (seconds)
    bounds every wait. See the module docstring for a step; `close` releases the shards.

    `bounds` lists each shard's (first row, end row); `bytes_moved` counts the payload
    bytes (ids and rows) sent to and received from the shards since creation, and
    `setup_bytes` the table rows sent once at creation.
    """

    def __init__(self, cluster, table, optimizer, *, timeout: float = 60.0):
        table = np.asarray(table)
        if table.ndim != 2 or not table.shape[0]:
            raise ValueError(f"ShardedEmbedding: table must be a 2-D array with rows, got shape {table.shape}")
        if table.dtype.kind != "f":
            raise TypeError(f"ShardedEmbedding: table must hold floats, got dtype {table.dtype}")
        if (
            getattr(optimizer, "weight_decay", None)
            or any(getattr(optimizer, o, None) is not None for o in ("clipnorm", "global_clipnorm"))
            or type(optimizer).update_step is not optimizers.Optimizer.update_step
        ):
            raise ValueError(
                f"ShardedEmbedding: {type(optimizer).__name__} with weight_decay, clipnorm, global_clipnorm or its "
                "own update_step needs the whole table each step; use one that updates rows (update_rule)"
            )
        if isinstance(timeout, bool) or not isinstance(timeout, int | float) or not timeout > 0:
            raise ValueError(f"ShardedEmbedding: timeout must be a number of seconds > 0, got {timeout!r}")
        self.shape, self.dtype, self.timeout = table.shape, table.dtype, float(timeout)
        workers = cluster.workers
        blocks = split_variables([table.shape], len(workers), row_block_bytes=0, itemsize=table.itemsize)
        self.bounds = [b.rows or (0, table.shape[0]) for b in blocks]
        self.starts = np.array([start for start, _ in self.bounds[1:]], np.int64)
        self.bytes_moved = 0
        self.setup_bytes = int(table.nbytes)
        client, config = cluster.client, optimizers.serialize(optimizer)
        futures = [
            client.submit(
                EmbeddingShard,
                table[start:stop],
                start,
                config,
                actor=True,
                workers=[workers[b.shard]],
                allow_other_workers=False,
                pure=False,
            )
            for b, (start, stop) in zip(blocks, self.bounds, strict=True)
        ]
        self._futures = futures
        self.shards = [f.result(timeout=self.timeout) for f in futures]

    def _owners(self, ids: np.ndarray) -> np.ndarray:
        return np.searchsorted(self.starts, ids, side="right")

    def _wait(self, calls: dict) -> dict:
        answers = {}
        for shard, call in calls.items():
            try:
                answers[shard] = call.result(timeout=self.timeout)
            except (TimeoutError, concurrent.futures.TimeoutError):
                raise TimeoutError(
                    f"ShardedEmbedding: shard {shard} (rows {self.bounds[shard]}) did not answer within "
                    f"{self.timeout:g}s"
                ) from None
        return answers

    def pull(self, ids) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """(unique ids, inverse, their rows): `unique[inverse]` equals `ids` (any shape) and
        `rows[i]` is row `unique[i]`, gathered from the shards that own them."""
        ids = np.asarray(ids)
        if ids.dtype.kind not in "iu":
            raise TypeError(f"ShardedEmbedding.pull: ids must be integers, got dtype {ids.dtype}")
        if ids.size and (ids.min() < 0 or ids.max() >= self.shape[0]):
            raise ValueError(
                f"ShardedEmbedding.pull: ids must lie in [0, {self.shape[0]}), got {ids.min()}..{ids.max()}"
            )
        unique, inverse = np.unique(ids.astype(np.int64), return_inverse=True)
        owners = self._owners(unique)
        parts = {s: unique[owners == s] for s in np.unique(owners).tolist()}
        answers = self._wait({s: self.shards[s].gather(part) for s, part in parts.items()})
        rows = np.empty((len(unique), self.shape[1]), self.dtype)
        for s, part in parts.items():
            rows[owners == s] = answers[s]
            self.bytes_moved += part.nbytes + answers[s].nbytes
        return unique, inverse.reshape(ids.shape), rows

    def push(self, unique: np.ndarray, gradient, step: int) -> None:
        """Apply `gradient` (an IndexedSlices over the pulled rows, or a dense array with a
        row per id of `unique`) to the rows `unique`, as the optimizer's step `step` (from
        1); only the shards owning those rows are sent anything."""
        unique = np.asarray(unique, np.int64)
        if isinstance(gradient, IndexedSlices):
            gradient = sparse.coalesce(gradient)
            ids, values = unique[gradient.indices.numpy()], gradient.values.numpy()
        else:
            values = np.asarray(gradient)
            if values.shape != (len(unique), self.shape[1]):
                raise ValueError(
                    f"ShardedEmbedding.push: a dense gradient must have shape {(len(unique), self.shape[1])}, "
                    f"got {values.shape}"
                )
            ids = unique
        values = values.astype(self.dtype, copy=False)
        owners = self._owners(ids)
        calls = {}
        for s in np.unique(owners).tolist():
            part_ids, part_values = ids[owners == s], values[owners == s]
            calls[s] = self.shards[s].apply(part_ids, part_values, int(step))
            self.bytes_moved += part_ids.nbytes + part_values.nbytes
        self._wait(calls)

    def numpy(self) -> np.ndarray:
        """The whole table, joined from the shards (for checks and saving, not per step)."""
        answers = self._wait({s: shard.value() for s, shard in enumerate(self.shards)})
        return np.concatenate([answers[s] for s in range(len(self.shards))])

    def close(self) -> None:
        """Release the shard actors."""
        for future in self._futures:
            future.release()
        self._futures, self.shards = [], []

    def __enter__(self) -> ShardedEmbedding:
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def __repr__(self) -> str:
        return f"ShardedEmbedding(rows={self.shape[0]}, width={self.shape[1]}, shards={len(self.bounds)})"
