"""The data of fit / evaluate / predict: Keras' argument checks, arrays with their sample
and class weights, and the batches of each epoch (from arrays or a `tp.data.Dataset`),
`steps_per_epoch` at a time, their targets checked; `DataAdapter` holds one call's data.

>>> import numpy as np
>>> data = ArrayData(np.zeros((5, 2)), np.array([0, 1, 1, 0, 1]))
>>> batches = EpochBatches(lambda epoch: data.dataset().batch(2).repeat(), -1, steps=2, where="fit")
>>> [y.tolist() for x, y in batches.epoch(0)], [y.tolist() for x, y in batches.epoch(1)]
([[0, 1], [1, 0]], [[1], [0, 1]])
>>> class_sample_weights(np.array([0, 1, 1]), {1: 3.0}).tolist()
[1.0, 3.0, 3.0]
"""

from __future__ import annotations

import itertools
import math
import warnings
from collections.abc import Callable, Iterator

import numpy as np

from tapeflow import tree
from tapeflow.backends.draws import swap_order
from tapeflow.data.dataset import INFINITE_CARDINALITY, UNKNOWN_CARDINALITY, Dataset
from tapeflow.data.py_dataset import PyDataset
from tapeflow.ops.random import global_generator
from tapeflow.ops.registry import as_tensor
from tapeflow.queue.feeding import queue_batches
from tapeflow.queue.queues import QueueBase
from tapeflow.tensor import Tensor
from tapeflow.trainers.compile_losses import per_output
from tapeflow.trainers.target_checks import TargetChecks

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
def map_inputs(fn, x):
    """`fn` applied to each input of `x`: one array, or a tuple (from a list or tuple) or a
    dict of them, where an item that is itself a nested Python list is one array.

    >>> map_inputs(len, {"a": [1, 2], "b": [3]}), map_inputs(len, [[1], [2, 3]])
    ({'a': 2, 'b': 1}, (1, 2))
    """
    if isinstance(x, list | tuple):
        x = tuple(x)  # a tuple, so that Dataset.from_tensor_slices takes it for several inputs
    return tree.map_structure(fn, x, is_leaf=lambda item: item is not x)


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
        parts = (("x", x), ("y", y), ("sample_weight", sample_weight))
        named = [(name, a) for name, part in parts for a in tree.flatten(part) if a is not None]
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
        cut = lambda part: tree.map_structure(lambda a: None if a is None else a[rows], part)  # noqa: E731
        data = ArrayData.__new__(ArrayData)
        data.x, data.y, data.sample_weight = cut(self.x), cut(self.y), cut(self.sample_weight)
        data.rows = len(range(*rows.indices(self.rows)))
        return data

    def split(self, fraction: float) -> tuple[ArrayData, ArrayData]:
        """(the first 1 - fraction of the rows, the rest), as Keras' validation_split cuts."""
        cut = int(math.floor(self.rows * (1.0 - fraction)))
        return self.rows_of(slice(None, cut)), self.rows_of(slice(cut, None))


def unpack_x_y_sample_weight(data) -> tuple:
    """(x, y, sample_weight) from one batch as fit passes it to `train_step`: `x`, `(x,)`,
    `(x, y)` or `(x, y, sample_weight)` (a list counts as a tuple), with None for what
    is missing; as Keras 3's `keras.utils.unpack_x_y_sample_weight`.

    >>> unpack_x_y_sample_weight(([1.0], [0.0])), unpack_x_y_sample_weight({"a": 1})
    (([1.0], [0.0], None), ({'a': 1}, None, None))
    """
    if isinstance(data, list):
        data = tuple(data)
    if not isinstance(data, tuple):
        return data, None, None
    if not 1 <= len(data) <= 3:
        raise ValueError(
            f"unpack_x_y_sample_weight: a batch must be x, (x,), (x, y) or (x, y, sample_weight), got a tuple "
            f"of {len(data)}; for a model with several inputs nest them: ((x1, x2), y)"
        )
    return (*data, *(None,) * (3 - len(data)))


def pack_x_y_sample_weight(x, y=None, sample_weight=None):
    """One batch in the form `fit` passes to `train_step`: `x` alone (or `(x,)` when x is
    itself a tuple or list), `(x, y)` or `(x, y, sample_weight)`; as Keras 3's
    `keras.utils.pack_x_y_sample_weight`.

    >>> pack_x_y_sample_weight(1), pack_x_y_sample_weight([1, 2]), pack_x_y_sample_weight(1, 2)
    (1, ([1, 2],), (1, 2))
    """
    if y is None:
        return (x,) if isinstance(x, list | tuple) else x
    if sample_weight is None:
        return x, y
    return x, y, sample_weight


def unpack(element, where: str) -> tuple:
    """(x, y, sample_weight) from one element a Dataset, PyDataset or generator yields.

    >>> unpack((1, 2), "fit"), unpack(5, "predict")
    ((1, 2, None), (5, None, None))
    """
    try:
        return unpack_x_y_sample_weight(element)
    except ValueError as err:
        raise ValueError(f"{where}: {err}") from None


# -------------------------------------------------------------------- epochs
class EpochBatches:
    """The (x, y, sample_weight) batches of each epoch.

    `make_pass(epoch)` starts a fresh pass over the data. Without `steps`, an epoch is one
    whole pass. With `steps`, an epoch is that many batches, and the pass goes on in the next
    epoch where the last one stopped, as Keras does; a pass that runs out mid-epoch ends
    that epoch early with a warning, and the next epoch starts a new pass. Infinite data
    without `steps`, and empty data, are errors naming the argument. `exhaustible` data (a
    Python generator, which has one pass only) that runs out ends the epoch with a warning
    and sets `ran_out`, as Keras stops training then.
    """

    def __init__(
        self,
        make_pass: Callable[[int], Iterator],
        cardinality: int,
        steps: int | None,
        where: str,
        steps_argument: str = "steps_per_epoch",
        prepare: Callable = lambda element: element,
        exhaustible: bool = False,
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
        self._exhaustible, self._seen_any, self.ran_out = exhaustible, False, False
        self.steps_given = steps
        self.steps = steps if steps is not None else (cardinality if cardinality >= 0 else None)
        self._iterator = None

    def epoch(self, epoch: int) -> Iterator:
        if self.steps_given is None:
            seen = 0
            for element in self._make_pass(epoch):
                seen += 1
                self._seen_any = True
                yield self._prepare(element)
            if not seen:
                self._empty()
            return
        taken, fresh = 0, False
        while taken < self.steps_given:
            if self._iterator is None:
                self._iterator, fresh = iter(self._make_pass(epoch)), True
            element = next(self._iterator, _END)
            if element is _END:
                if self._exhaustible:
                    self._empty()
                    return
                self._iterator = None
                if fresh:
                    self._empty()
                if taken:
                    warnings.warn(
                        f"{self._where}: the data ran out after {taken} of {self._steps_argument}="
                        f"{self.steps_given} batches; this epoch ends early and the next starts a new pass",
                        stacklevel=3,
                    )
                    return
                continue
            fresh = False
            self._seen_any = True
            taken += 1
            yield self._prepare(element)

    def _empty(self) -> None:
        if not (self._exhaustible and self._seen_any):
            raise ValueError(f"{self._where}: the data is empty: it yielded no batch")
        self.ran_out = True
        warnings.warn(
            f"{self._where}: the generator ran out of data, so training stops here; make it yield at least "
            f"{self._steps_argument} * epochs batches (or loop forever and pass {self._steps_argument}=)",
            stacklevel=4,
        )

    def close(self) -> None:
        """Stop a pass left open by `steps` (and any prefetch thread it runs)."""
        close = None if self._exhaustible else getattr(self._iterator, "close", None)
        if close is not None:
            close()
        self._iterator = None


# ------------------------------------------------------------ one call's data
def array_data(x, y, sample_weight, where: str, output_names: list[str] | None = None) -> ArrayData:
    """Arrays checked as Keras checks them: x required; with `output_names` (not for
    predict) y numeric when given (a loss that needs no targets trains on x alone), and y
    and sample_weight with one entry per output for several outputs.

    >>> array_data(np.ones((2, 3)), [0, 1], None, "fit", ["output"]).y.tolist()
    [0, 1]
    """
    if x is None:
        raise ValueError(
            f"{where}: x is required: an array, a list or dict of arrays (several inputs), a tp.data.Dataset, "
            "a PyDataset or a generator"
        )
    xs = map_inputs(lambda a: as_array(a, "x", where, numeric=False), x)
    if output_names is None:
        return ArrayData(xs, where=where)
    if y is None:
        if sample_weight is not None:
            raise ValueError(f"{where}: sample_weight was given without y; weights apply to the targets' losses")
        return ArrayData(xs, where=where)
    names = output_names
    if len(names) == 1:
        ys = as_array(y, "y", where)
        sws = None if sample_weight is None else as_array(sample_weight, "sample_weight", where)
    else:
        ys = _by_name(per_output(y, names, "y", where), names, "y", where)
        sws = sample_weight
        if isinstance(sample_weight, list | tuple | dict):
            sws = _by_name(per_output(sample_weight, names, "sample_weight", where), names, "sample_weight", where)
        elif sample_weight is not None:
            sws = as_array(sample_weight, "sample_weight", where)
    return ArrayData(xs, ys, sws, where)


def _by_name(entries: list, names: list[str], argument: str, where: str) -> dict:
    """Per-output arrays keyed by output name (outputs without one left out)."""
    return {
        name: as_array(entry, f"{argument}['{name}']", where)
        for name, entry in zip(names, entries, strict=True)
        if entry is not None
    }


def is_generator(x) -> bool:
    """Whether `x` is a Python generator (or another one-pass iterator), which fit reads
    batch by batch as Keras does."""
    return isinstance(x, Iterator) and not isinstance(x, Dataset | PyDataset)


def _source(x, y, sample_weight, where: str, output_names: list[str] | None):
    """A Dataset, PyDataset, generator or ArrayData as it is, or arrays as ArrayData."""
    if isinstance(x, Dataset | PyDataset) or is_generator(x):
        kind = "Dataset" if isinstance(x, Dataset) else "PyDataset" if isinstance(x, PyDataset) else "generator"
        if y is not None:
            raise ValueError(f"{where}: with a {kind} x, y must be None (it yields (x, y) batches itself)")
        if sample_weight is not None:
            raise ValueError(f"{where}: pass sample weights inside the dataset, as (x, y, sample_weight) batches")
        return x
    if isinstance(x, ArrayData):
        return x
    return array_data(x, y, sample_weight, where, output_names)


def validation_arguments(validation_data) -> tuple:
    """fit's `validation_data` as (x, y, sample_weight): (x, y), (x, y, sample_weight), a
    Dataset, PyDataset or generator, or the ArrayData that validation_split held out."""
    if isinstance(validation_data, ArrayData | Dataset | PyDataset) or is_generator(validation_data):
        return validation_data, None, None
    if isinstance(validation_data, tuple | list) and len(validation_data) in (2, 3):
        return (*validation_data, *(None,) * (3 - len(validation_data)))
    kind = type(validation_data).__name__
    raise ValueError(
        f"fit: validation_data must be (x, y), (x, y, sample_weight), a Dataset, a PyDataset or a generator, got {kind}"
    )


def with_class_weight(arrays: ArrayData, class_weight, where: str, output_names: list[str]) -> ArrayData:
    """`arrays` with `class_weight` turned into their sample weights."""
    table = class_weight_table(class_weight, where)
    if table is None:
        return arrays
    check_class_weight(where, arrays.sample_weight, output_names)
    arrays.sample_weight = class_sample_weights(arrays.y, table)
    return arrays


def check_class_weight(where: str, sample_weight, output_names: list[str]) -> None:
    if sample_weight is not None:
        raise ValueError(f"{where}: give class_weight or sample_weight, not both (as in Keras)")
    if len(output_names) > 1:
        raise ValueError(f"{where}: class_weight is only supported for models with a single output")


def to_tensors(structure):
    """A batch as tensors: arrays become tensors, tuples lists, dicts keep their keys.

    >>> to_tensors((np.zeros(2), np.ones(1)))[1].shape
    (1,)
    """
    if structure is None:
        return None
    if isinstance(structure, dict):
        return {k: as_tensor(v) for k, v in structure.items()}
    if isinstance(structure, list | tuple):
        return [as_tensor(v) for v in structure]
    return as_tensor(structure)


def one_batch(x, y, sample_weight, where: str, targets: TargetChecks, class_weight=None) -> tuple:
    """(x, y, sample_weight) tensors of the one batch train_on_batch or test_on_batch takes."""
    if isinstance(x, Dataset):
        raise TypeError(f"{where}: takes one batch of arrays, not a Dataset; use fit or evaluate")
    names = targets.output_names
    arrays = with_class_weight(array_data(x, y, sample_weight, where, names), class_weight, where, names)
    targets(arrays.x, arrays.y)
    return to_tensors(arrays.x), to_tensors(arrays.y), to_tensors(arrays.sample_weight)


# ------------------------------------------------------------------ shuffling
def shuffle_seed(seed) -> int:
    """fit's shuffle seed: `seed` checked, or one drawn from tp.random's global stream."""
    if seed is None:
        seed = int(global_generator().numpy.integers(2**63))
    if isinstance(seed, bool) or not isinstance(seed, int | np.integer) or seed < 0:
        raise ValueError(f"fit: seed must be None or an integer >= 0, got {seed!r}")
    return int(seed)


def epoch_seed(base: int, epoch: int) -> int:
    """The shuffle seed of one epoch: a function of (base seed, epoch) only."""
    return int(np.random.SeedSequence([base, epoch]).generate_state(1, np.uint64)[0]) >> 1


def shuffled_batches(elements: Dataset, rows: int, batch_size: int, seed: int, epoch: int) -> Dataset:
    """One epoch's batches of the `rows` elements, shuffled in an order that depends only
    on (`seed`, `epoch`): a run resumed from a checkpoint (which stores the seed) reshuffles
    exactly as the uninterrupted run did.

    >>> data = ArrayData(np.arange(6))
    >>> [b.tolist() for b in shuffled_batches(data.dataset(), 6, 4, 3, 0)] == [
    ...     b.tolist() for b in shuffled_batches(data.dataset(), 6, 4, 3, 0)]
    True
    """
    shuffled = elements.shuffle(rows, seed=epoch_seed(seed, epoch), reshuffle_each_iteration=False)
    return shuffled.batch(batch_size)


class Batch(tuple):
    """(x, y, sample_weight) of one batch cut from ArrayData (the parts it lacks are None)."""


def shuffled_order(rows: int, seed: int, epoch: int) -> np.ndarray:
    """The row order of one shuffled epoch: the order `shuffled_batches` takes the rows
    in (a shuffle whose buffer holds every row), as one array of row numbers.

    >>> data = ArrayData(np.arange(6))
    >>> [int(i) for b in shuffled_batches(data.dataset(), 6, 4, 3, 0) for i in b] == shuffled_order(6, 3, 0).tolist()
    True
    """
    rng = np.random.default_rng([epoch_seed(seed, epoch), 0])
    draws = rng.integers(0, np.arange(rows, 0, -1))  # each from the rows still left
    # the draw from the first `last + 1` rows left is swapped to `last`: the order, back to front
    return swap_order(draws)


def array_batches(arrays: ArrayData, batch_size: int, order: np.ndarray | None = None) -> Iterator:
    """The (x, y, sample_weight) `Batch`es of one pass over `arrays`, `batch_size` rows
    each: read-only views of consecutive rows of C-contiguous arrays without `order` (an
    array with another layout is copied, one batch at a time), else the rows `order` lists,
    one gather per array and batch.

    >>> data = ArrayData(np.arange(10.0).reshape(5, 2), np.arange(5))
    >>> [(x.shape, y.tolist(), w) for x, y, w in array_batches(data, 2, np.array([4, 0, 1, 3, 2]))]
    [((2, 2), [4, 0], None), ((2, 2), [1, 3], None), ((1, 2), [2], None)]
    """
    parts = (arrays.x, arrays.y, arrays.sample_weight)
    leaves = tree.flatten(parts)
    rows = len(arrays)
    for start in range(0, rows, batch_size):
        if order is None:
            cut = slice(start, start + batch_size)
            picked = [None if a is None else _rows_view(a, cut) for a in leaves]
        else:
            chosen = order[start : start + batch_size]
            picked = [None if a is None else np.take(a, chosen, axis=0) for a in leaves]
        yield Batch(tree.pack_sequence_as(parts, picked))


def _rows_view(array: np.ndarray, rows: slice) -> np.ndarray:
    """`array[rows]` as a read-only view (the caller's data stays as it is), or a
    C-contiguous copy where the rows are not contiguous in memory."""
    if not array.flags.c_contiguous:
        return np.ascontiguousarray(array[rows])
    view = array[rows]
    view.flags.writeable = False
    return view


# ---------------------------------------------------------------- the adapter
class DataAdapter:
    """The data of one fit, evaluate or predict call, checked once: a Dataset, PyDataset or
    generator as it is, or arrays (less the rows validation_split holds out, with class
    weights as their sample weights), and each epoch's (x, y, sample_weight) batches as
    tensors, their targets checked (`targets`, None for predict), `steps` at a time.

    Arrays (and a PyDataset's batch order) are shuffled afresh each epoch (with
    `shuffle`) in an order that depends only on (`seed`, epoch); `seed` may be changed
    before an epoch starts (to resume a run). With `for_strategy`, the batches are a
    distributed strategy's to make: it takes `arrays` and batches of row numbers
    (`strategy_batches`).

    >>> import tapeflow as tp
    >>> from tapeflow.trainers.compile_losses import OutputLosses
    >>> targets = TargetChecks(OutputLosses("mse"), output_specs=None)
    >>> data = DataAdapter(np.zeros((5, 2)), np.arange(5.0), where="fit", batch_size=2, targets=targets)
    >>> data.steps, [y.shape for _, y, _ in data.epoch(0)]
    (3, [(2,), (2,), (1,)])
    """

    def __init__(
        self,
        x,
        y=None,
        sample_weight=None,
        *,
        where: str,
        batch_size: int,
        targets: TargetChecks | None = None,
        steps: int | None = None,
        steps_argument: str = "steps_per_epoch",
        class_weight=None,
        shuffle: bool = False,
        seed=None,
        validation_split: float = 0.0,
        for_strategy: bool = False,
    ):
        names = None if targets is None else targets.output_names
        self.where, self.batch_size, self.targets = where, batch_size, targets
        if isinstance(x, QueueBase) and for_strategy:  # the strategy's replicas dequeue their own rows
            self._strategy_queue(x, y, sample_weight, steps, validation_split)
            return
        if isinstance(x, QueueBase):  # read as a generator of its batches, until closed and drained
            x = queue_batches(x, batch_size, where, y, sample_weight)
        source = _source(x, y, sample_weight, where, names)
        self.held_out = None
        if validation_split:
            if not isinstance(source, ArrayData):
                raise ValueError(f"{where}: validation_split needs arrays, not a {type(source).__name__}")
            source, self.held_out = source.split(validation_split)
        self._class_weight = None  # a stream's, applied batch by batch
        streamed = not isinstance(source, ArrayData)
        if streamed:
            self._class_weight = None if names is None else class_weight_table(class_weight, where)
        else:
            if names is not None:
                source = with_class_weight(source, class_weight, where, names)
            if not len(source):
                raise ValueError(f"{where}: the data is empty: x has no samples")
        self.source = source
        finite_py = isinstance(source, PyDataset) and source.num_batches is not None
        self.seed = shuffle_seed(seed) if shuffle and (not streamed or finite_py) else None
        self.batches = None
        if for_strategy:
            if isinstance(source, PyDataset) or is_generator(source):
                raise ValueError(
                    f"{where}: distribute= takes arrays or a tp.data.Dataset, not a {type(source).__name__}"
                )
            count = source.cardinality() if isinstance(source, Dataset) else -(-len(source) // batch_size)
            self.steps = count if count >= 0 else None
            return
        if isinstance(source, Dataset):
            make_pass, cardinality = (lambda epoch: source.as_numpy_iterator()), source.cardinality()
        elif isinstance(source, PyDataset):
            count = source.num_batches
            make_pass = self._py_pass
            cardinality = INFINITE_CARDINALITY if count is None else count
        elif is_generator(source):
            make_pass, cardinality = (lambda epoch: source), UNKNOWN_CARDINALITY
        else:
            make_pass, cardinality = self._array_pass, -(-len(source) // batch_size)
        self.batches = EpochBatches(
            make_pass, cardinality, steps, where, steps_argument, self._prepare, exhaustible=is_generator(source)
        )
        self.steps = self.batches.steps

    @property
    def ran_out(self) -> bool:
        """Whether a generator ran out of data (fit then stops, as Keras does)."""
        return self.batches is not None and self.batches.ran_out

    def _strategy_queue(self, queue, y, sample_weight, steps, validation_split) -> None:
        """A queue for a strategy, whose replicas dequeue `steps` batches an epoch themselves."""
        queue_batches(queue, self.batch_size, self.where, y, sample_weight)  # checks y and sample_weight
        if steps is None or validation_split:
            raise ValueError(f"{self.where}: a queue as x with distribute= needs steps_per_epoch (no validation_split)")
        self.source, self.held_out, self.seed, self.batches, self.steps = queue, None, None, None, steps

    @property
    def arrays(self) -> tuple:
        """What a strategy starts on: (x, y) arrays, or (the Dataset or queue, None)."""
        if isinstance(self.source, Dataset | QueueBase):
            return self.source, None
        return self.source.x, self.source.y

    def first_inputs(self):
        """The inputs of the first batch as tensors, or None for streamed data (to build a model)."""
        if not isinstance(self.source, ArrayData):
            return None
        return to_tensors(self.source.rows_of(slice(None, self.batch_size)).x)

    def epoch(self, epoch: int) -> Iterator:
        """The (x, y, sample_weight) tensors of each batch of `epoch`."""
        return self.batches.epoch(epoch)

    def strategy_batches(self, epoch: int) -> Dataset:
        """What a strategy runs `epoch` on: the Dataset itself, or the row numbers of each
        batch of arrays, in the order the epoch takes them."""
        if isinstance(self.source, Dataset):
            return self.source
        if isinstance(self.source, QueueBase):  # positions only: each replica dequeues its rows
            return [np.arange(k * self.batch_size, (k + 1) * self.batch_size) for k in range(self.steps)]
        return self._batched(ArrayData(np.arange(len(self.source))).dataset(), epoch)

    def _array_pass(self, epoch: int) -> Iterator:
        """One epoch of array data: its batches in row order, or in the epoch's shuffled order."""
        order = None if self.seed is None else shuffled_order(len(self.source), self.seed, epoch)
        return array_batches(self.source, self.batch_size, order)

    def _py_pass(self, epoch: int) -> Iterator:
        """One epoch of a PyDataset: `on_epoch_begin`, its batches (in a shuffled order with
        `shuffle`), then `on_epoch_end` once the pass is done."""
        data = self.source
        data.on_epoch_begin()
        count = data.num_batches
        if count is None:
            order = itertools.count()
        elif self.seed is None:
            order = range(count)
        else:
            order = np.random.default_rng(epoch_seed(self.seed, epoch)).permutation(count).tolist()
        for index in order:
            yield data[index]
        data.on_epoch_end()

    def _batched(self, elements: Dataset, epoch: int) -> Dataset:
        if self.seed is None:
            return elements.batch(self.batch_size)
        return shuffled_batches(elements, len(self.source), self.batch_size, self.seed, epoch)

    def _prepare(self, element) -> tuple:
        """One batch as tensors, its class weights applied and its targets checked."""
        targets = self.targets
        x, y, sw = element if isinstance(element, Batch) else unpack(element, self.where)
        if targets is not None:
            if self._class_weight is not None and y is not None:
                check_class_weight(self.where, sw, targets.output_names)
                sw = class_sample_weights(y, self._class_weight)
            targets(x, y)
        return to_tensors(x), to_tensors(y), to_tensors(sw)

    def close(self) -> None:
        """Stop a pass left open by `steps` (and any prefetch thread it runs)."""
        if self.batches is not None:
            self.batches.close()
