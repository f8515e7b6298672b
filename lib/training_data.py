"""The data of fit / evaluate / predict: Keras' argument checks, arrays with their sample
and class weights, and the batches of each epoch (from arrays or a `tp.data.Dataset`),
`steps_per_epoch` at a time.

>>> import numpy as np
>>> data = ArrayData(np.zeros((5, 2)), np.array([0, 1, 1, 0, 1]))
>>> batches = EpochBatches(lambda epoch: data.dataset().batch(2).repeat(), -1, steps=2, where="fit")
>>> [y.tolist() for x, y in batches.epoch(0)], [y.tolist() for x, y in batches.epoch(1)]
([[0, 1], [1, 0]], [[1], [0, 1]])
>>> class_sample_weights(np.array([0, 1, 1]), {1: 3.0}).tolist()
[1.0, 3.0, 3.0]
"""

from __future__ import annotations

import math
import warnings
from collections.abc import Callable, Iterator

import numpy as np

from tapeflow.data.dataset import INFINITE_CARDINALITY, Dataset
from tapeflow.tensor import Tensor

_END = object()


# ------------------------------------------------------------- argument checks
def count_argument(value, name: str, where: str, minimum: int = 1, default: int | None = None) -> int | None:
    """`value` as an int >= `minimum` (None gives `default`), or a ValueError naming `name`.

    >>> count_argument(None, "batch_size", "fit", default=32), count_argument(np.int64(3), "epochs", "fit")
    (32, 3)
    """
    if value is None:
        return default
    if isinstance(value, bool) or not isinstance(value, int | np.integer) or value < minimum:
        raise ValueError(f"{where}: {name} must be an integer >= {minimum}, got {value!r}")
    return int(value)


def validation_fraction(value, where: str) -> float:
    """`validation_split` as a float in [0, 1), as Keras takes it.

    >>> validation_fraction(0.25, "fit")
    0.25
    """
    if isinstance(value, bool) or not isinstance(value, int | float | np.integer | np.floating):
        raise ValueError(f"{where}: validation_split must be a number in [0, 1), got {value!r}")
    if not 0.0 <= value < 1.0:
        raise ValueError(f"{where}: validation_split must be in [0, 1), got {value!r}")
    return float(value)


def class_weight_table(class_weight, where: str) -> dict[int, float] | None:
    """`class_weight` checked: a dict from integer class ids to numbers.

    >>> class_weight_table({np.int64(0): 1, 1: 2.5}, "fit")
    {0: 1.0, 1: 2.5}
    """
    if class_weight is None:
        return None
    if not isinstance(class_weight, dict):
        raise ValueError(
            f"{where}: class_weight must be a dict from class ids to weights, got {type(class_weight).__name__}"
        )
    table = {}
    for key, weight in class_weight.items():
        if isinstance(key, bool) or not isinstance(key, int | np.integer):
            raise ValueError(f"{where}: class_weight keys must be integer class ids, got {key!r}")
        if isinstance(weight, bool) or not isinstance(weight, int | float | np.integer | np.floating):
            raise ValueError(f"{where}: class_weight[{key}] must be a number, got {weight!r}")
        table[int(key)] = float(weight)
    return table


def class_sample_weights(y, class_weight: dict[int, float]) -> np.ndarray:
    """One weight per sample: its class's weight (1 for a class not listed), the class read
    from integer ids, ids with a trailing axis of 1, or one-hot rows (argmax), as Keras does."""
    y = np.asarray(y)
    if y.ndim > 1:
        y = np.argmax(y, axis=-1) if y.shape[-1] != 1 else y[..., 0]
    ids = np.round(y).astype(np.int64)
    weights = np.ones(ids.shape, dtype=np.float32)
    for key, weight in class_weight.items():
        weights[ids == key] = weight
    return weights


# ----------------------------------------------------------------- structures
def map_structure(fn, structure):
    """`fn` applied to each array of an array, a tuple (or list) or a dict of them.

    >>> map_structure(len, {"a": [1, 2], "b": [3]}), map_structure(len, [[1], [2, 3]])
    ({'a': 2, 'b': 1}, (1, 2))
    """
    if structure is None:
        return None
    if isinstance(structure, dict):
        return {k: fn(v) for k, v in structure.items()}
    if isinstance(structure, list | tuple):
        return tuple(fn(v) for v in structure)
    return fn(structure)


def leaves(structure) -> list:
    """The arrays of a structure `map_structure` takes, in order.

    >>> leaves(None), leaves((1, 2)), leaves(3)
    ([], [1, 2], [3])
    """
    if structure is None:
        return []
    if isinstance(structure, dict):
        return list(structure.values())
    if isinstance(structure, list | tuple):
        return list(structure)
    return [structure]


def as_array(value, name: str, where: str, numeric: bool = True) -> np.ndarray:
    """`value` as a NumPy array with a sample axis; with `numeric`, strings are an error
    naming the argument.

    >>> as_array([1, 2], "y", "fit").tolist()
    [1, 2]
    """
    array = value.numpy() if isinstance(value, Tensor) else np.asarray(value)
    if array.ndim == 0:
        raise ValueError(f"{where}: {name} must be an array with one row per sample, got a scalar {value!r}")
    if numeric and array.dtype.kind not in "biuf":
        example = array.flat[0] if array.size else None
        raise ValueError(
            f"{where}: {name} must hold numbers, got dtype {array.dtype} (e.g. {example!r}); "
            "map string labels to integer class ids first"
        )
    return array


class ArrayData:
    """In-memory inputs `x`, targets `y` and `sample_weight`, each an array or a tuple or dict
    of arrays, all with the same number of rows."""

    def __init__(self, x, y=None, sample_weight=None, where: str = "fit"):
        self.x, self.y, self.sample_weight = x, y, sample_weight
        named = [("x", a) for a in leaves(x)] + [("y", a) for a in leaves(y)]
        named += [("sample_weight", a) for a in leaves(sample_weight)]
        if len({len(a) for _, a in named}) > 1:
            first = named[0]
            other = next((n, a) for n, a in named if len(a) != len(first[1]))
            if other[0] == first[0]:
                sizes = [len(a) for n, a in named if n == first[0]]
                raise ValueError(f"{where}: the {len(sizes)} inputs have different sample counts {sizes}")
            raise ValueError(f"{where}: {first[0]} has {len(first[1])} samples but {other[0]} has {len(other[1])}")
        self.rows = len(named[0][1]) if named else 0

    def __len__(self) -> int:
        return self.rows

    def dataset(self) -> Dataset:
        parts = tuple(p for p in (self.x, self.y, self.sample_weight) if p is not None)
        return Dataset.from_tensor_slices(parts if len(parts) > 1 else parts[0])

    def rows_of(self, rows: slice) -> ArrayData:
        cut = lambda part: map_structure(lambda a: a[rows], part)  # noqa: E731
        data = ArrayData.__new__(ArrayData)
        data.x, data.y, data.sample_weight = cut(self.x), cut(self.y), cut(self.sample_weight)
        data.rows = len(range(*rows.indices(self.rows)))
        return data

    def split(self, fraction: float) -> tuple[ArrayData, ArrayData]:
        """(the first 1 - fraction of the rows, the rest), as Keras' validation_split cuts."""
        cut = int(math.floor(self.rows * (1.0 - fraction)))
        return self.rows_of(slice(None, cut)), self.rows_of(slice(cut, None))


def unpack(element, where: str, need_y: bool = True):
    """(x, y, sample_weight) from one Dataset element: an (x, y) or (x, y, sample_weight)
    tuple; for predict (`need_y=False`) also x alone or (x,).

    >>> unpack((1, 2), "fit"), unpack(5, "predict", need_y=False)
    ((1, 2, None), (5, None, None))
    """
    if isinstance(element, tuple) and len(element) in (2, 3):
        return element if len(element) == 3 else (*element, None)
    if not need_y:
        return (element[0] if isinstance(element, tuple) and len(element) == 1 else element), None, None
    size = f"a tuple of {len(element)}" if isinstance(element, tuple) else f"a single {type(element).__name__}"
    raise ValueError(
        f"{where}: a Dataset must yield (x, y) or (x, y, sample_weight) tuples, got {size}; for a model "
        "with several inputs nest them: ((x1, x2), y)"
    )


# -------------------------------------------------------------------- epochs
class EpochBatches:
    """The (x, y, sample_weight) batches of each epoch.

    `make_pass(epoch)` starts a fresh pass over the data. Without `steps`, an epoch is one
    whole pass. With `steps`, an epoch is that many batches, and the pass goes on in the next
    epoch where the last one stopped, as Keras does; a pass that runs out mid-epoch ends
    that epoch early with a warning, and the next epoch starts a new pass. Infinite data
    without `steps`, and empty data, are errors naming the argument.
    """

    def __init__(
        self,
        make_pass: Callable[[int], Iterator],
        cardinality: int,
        steps: int | None,
        where: str,
        steps_argument: str = "steps_per_epoch",
        prepare: Callable = lambda element: element,
    ):
        if cardinality == INFINITE_CARDINALITY and steps is None:
            raise ValueError(
                f"{where}: the data is infinite (a Dataset.repeat() without a count), so an epoch would never "
                f"end; pass {steps_argument}= to say how many batches make one"
            )
        if cardinality == 0:
            raise ValueError(f"{where}: the data is empty: there is no batch to run")
        self._make_pass, self._prepare = make_pass, prepare
        self._steps_argument, self._where = steps_argument, where
        self.steps_given = steps
        self.steps = steps if steps is not None else (cardinality if cardinality >= 0 else None)
        self._iterator = None

    def epoch(self, epoch: int) -> Iterator:
        if self.steps_given is None:
            seen = 0
            for element in self._make_pass(epoch):
                seen += 1
                yield self._prepare(element)
            if not seen:
                raise ValueError(f"{self._where}: the data is empty: it yielded no batch")
            return
        taken, fresh = 0, False
        while taken < self.steps_given:
            if self._iterator is None:
                self._iterator, fresh = iter(self._make_pass(epoch)), True
            element = next(self._iterator, _END)
            if element is _END:
                self._iterator = None
                if fresh:
                    raise ValueError(f"{self._where}: the data is empty: it yielded no batch")
                if taken:
                    warnings.warn(
                        f"{self._where}: the data ran out after {taken} of {self._steps_argument}="
                        f"{self.steps_given} batches; this epoch ends early and the next starts a new pass",
                        stacklevel=3,
                    )
                    return
                continue
            fresh = False
            taken += 1
            yield self._prepare(element)

    def close(self) -> None:
        """Stop a pass left open by `steps` (and any prefetch thread it runs)."""
        close = getattr(self._iterator, "close", None)
        if close is not None:
            close()
        self._iterator = None
