"""`SparseRows`: a `tp.IndexedSlices` in wire form, the sparse gradient of an Embedding on
its way from a replica to the parameter shards: NumPy row ids of the whole variable and
one gradient row per id (ids may repeat; their rows add up), where an IndexedSlices holds
tensors. A row block takes the ids it holds, renumbered from its first row, so a shard
receives the rows of the batch that fall in its block and nothing more, and turns them
back into one IndexedSlices for its optimizer.

>>> import numpy as np
>>> g = SparseRows(np.array([7, 1, 7]), np.arange(3.0).reshape(3, 1))
>>> part = g.block((5, 10))
>>> part.indices.tolist(), part.values.ravel().tolist(), g.dense((10, 1)).ravel().tolist()
([2, 2], [0.0, 2.0], [0.0, 1.0, 0.0, 0.0, 0.0, 0.0, 0.0, 2.0, 0.0, 0.0])
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np


@dataclass(frozen=True)
class SparseRows:
    """Gradient rows `values` of the variable rows `indices` (a 1-D integer array): the
    `values` and `indices` of an IndexedSlices, as arrays."""

    indices: np.ndarray
    values: np.ndarray

    @property
    def nbytes(self) -> int:
        return int(self.indices.nbytes + self.values.nbytes)

    def block(self, rows: tuple[int, int] | None) -> SparseRows:
        """The ids in rows [start, stop) (all when `rows` is None), counted from start."""
        if rows is None:
            return self
        keep = (self.indices >= rows[0]) & (self.indices < rows[1])
        return SparseRows(self.indices[keep] - rows[0], self.values[keep])

    def dense(self, shape: tuple[int, ...]) -> np.ndarray:
        """The dense gradient of a variable of `shape`."""
        out = np.zeros(shape, self.values.dtype)
        np.add.at(out, self.indices, self.values)
        return out
