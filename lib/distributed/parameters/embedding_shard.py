"""`EmbeddingShard`: a Dask Actor holding one row block of an embedding table and its
optimizer slots. It answers lookups with the rows asked for and applies a sparse
gradient (row ids and their gradient rows) with the optimizer's row update, so the
rows no gradient names stay as they were, bit for bit.

Row ids are the table's own (global) ids; the shard subtracts its first row.

>>> import asyncio
>>> import numpy as np
>>> shard = EmbeddingShard(np.ones((3, 2), np.float32), 10, {"class_name": "SGD", "config": {"learning_rate": 0.5}})
>>> rows = asyncio.run(shard.gather(np.array([11, 12])))
>>> asyncio.run(shard.apply(np.array([11]), np.ones((1, 2), np.float32), 1))
>>> asyncio.run(shard.value()).tolist()
[[1.0, 1.0], [0.5, 0.5], [1.0, 1.0]]
"""

from __future__ import annotations

import numpy as np

from tapeflow import optimizers
from tapeflow.tensor import IndexedSlices, Tensor, Variable


class EmbeddingShard:
    """Rows `first_row` .. `first_row + len(rows)` of a table, updated by the optimizer that
    `optimizer_config` (`tp.optimizers.serialize` of it) describes."""

    def __init__(self, rows: np.ndarray, first_row: int, optimizer_config: dict):
        self.first_row = int(first_row)
        self.variable = Variable(np.array(rows), name="embedding_shard")
        self.optimizer = optimizers.get(optimizer_config)
        self.optimizer.build([self.variable])

    def _local(self, ids: np.ndarray) -> np.ndarray:
        local = np.asarray(ids, np.int64) - self.first_row
        if local.size and (local.min() < 0 or local.max() >= self.variable.shape[0]):
            raise ValueError(
                f"EmbeddingShard: row ids {np.asarray(ids).min()}..{np.asarray(ids).max()} fall outside this "
                f"shard's rows {self.first_row}..{self.first_row + self.variable.shape[0] - 1}"
            )
        return local

    async def gather(self, ids: np.ndarray) -> np.ndarray:
        """The rows with table ids `ids`."""
        return self.variable.numpy()[self._local(ids)]

    async def apply(self, ids: np.ndarray, values: np.ndarray, step: int) -> None:
        """Apply the gradient rows `values` of table ids `ids` (each id once) as the
        optimizer's step number `step` (from 1)."""
        local = self._local(ids)
        grad = IndexedSlices(Tensor(np.asarray(values, self.variable.dtype.np)), local, self.variable.shape)
        self.optimizer.apply_gradients_at([(grad, self.variable)], self.optimizer.learning_rate, int(step))
        self.optimizer.iterations = int(step)

    async def value(self) -> np.ndarray:
        """This shard's rows."""
        return self.variable.numpy()

    async def slots(self) -> dict[str, np.ndarray]:
        """This shard's optimizer slots, by name."""
        return {name: s.numpy() for name, s in self.optimizer.slots(self.variable).items()}
