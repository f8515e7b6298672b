"""Dataset: a lazy, re-iterable input pipeline in the style of tf.data.

A pipeline starts from in-memory arrays (`Dataset.from_tensor_slices`) or a
generator function (`Dataset.from_generator`), and each transformation
(`shuffle`, `map`, `batch`, `prefetch`, `repeat`, `take`) returns a new
Dataset. Nothing runs until you iterate, and every `for` loop over a Dataset
starts a fresh pass.

Elements come out as NumPy values with the structure they went in with: one
array, a tuple of arrays, or a dict of arrays (nested as deep as you like).
A component that is a scalar per element comes out as a NumPy scalar, as
`tf.data`'s `as_numpy_iterator()` gives it. Single elements of
`from_tensor_slices` are read-only views of the source arrays; batches are
fresh arrays.

>>> import numpy as np
>>> import tapeflow as tp
>>> x = np.arange(10, dtype="float32").reshape(5, 2)
>>> y = np.array([0, 1, 0, 1, 1])
>>> ds = tp.data.Dataset.from_tensor_slices((x, y)).shuffle(5, seed=0).batch(2)
>>> ds
<Dataset from_tensor_slices(((5, 2), (5,))).shuffle(5).batch(2): 3 elements>
>>> for xb, yb in ds:
...     print(xb.tolist(), yb.tolist())
[[8.0, 9.0], [4.0, 5.0]] [1, 0]
[[2.0, 3.0], [0.0, 1.0]] [1, 0]
[[6.0, 7.0]] [1]
"""

from __future__ import annotations

import itertools
import os
import queue
import sys
import threading
from collections import deque
from collections.abc import Callable, Iterable, Iterator
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from itertools import islice
from typing import Any

import numpy as np

from tapeflow import tree
from tapeflow.ops.creation import tensor as as_tensor
from tapeflow.ops.random import global_generator

AUTOTUNE = -1
"""Let the pipeline pick: `map` runs `os.cpu_count()` calls at once, `prefetch` keeps 2."""
INFINITE_CARDINALITY = -1
UNKNOWN_CARDINALITY = -2

_AUTOTUNE_PREFETCH = 2  # double buffering: hides input latency whenever the producer keeps up
_DRAW_BLOCK = 1024  # shuffle draws random slots this many at a time


class Dataset:
    """A lazy, re-iterable sequence of elements; build one with `from_tensor_slices`.

    Iterating yields NumPy arrays (or tuples / dicts of them); see the module docstring.

    >>> import tapeflow as tp
    >>> ds = tp.data.Dataset.from_tensor_slices([1, 2, 3]).map(lambda v: v * 10)
    >>> [int(v) for v in ds], [int(v) for v in ds], len(ds)
    ([10, 20, 30], [10, 20, 30], 3)
    """

    _cardinality: int = UNKNOWN_CARDINALITY
    # The from_tensor_slices source when every element is source[i] for some index stream
    # (from_tensor_slices, then any of shuffle / repeat / take): batch then gathers whole
    # arrays with one fancy index instead of stacking element by element.
    _slices: _TensorSlices | None = None

    def __init__(self, input_dataset: Dataset | None = None):
        self._input = input_dataset

    # ----- sources -----
    @staticmethod
    def from_tensor_slices(tensors: Any) -> Dataset:
        """One element per row of `tensors`: an array, or a tuple / dict (nested) of arrays.

        Arrays may be NumPy arrays, tapeflow tensors or anything `np.asarray` takes; all
        must have the same length along axis 0. The arrays are not copied.

        >>> import numpy as np
        >>> import tapeflow as tp
        >>> ds = tp.data.Dataset.from_tensor_slices({"x": np.zeros((3, 2)), "y": tp.tensor([7, 8, 9])})
        >>> first = next(iter(ds))
        >>> first["x"].shape, int(first["y"])
        ((2,), 7)
        >>> tp.data.Dataset.from_tensor_slices((np.zeros((3, 2)), np.zeros(4)))
        Traceback (most recent call last):
        ...
        ValueError: Dataset.from_tensor_slices: all components need the same length ... [0]: (3, 2), [1]: (4,)
        """
        return _TensorSlices(tensors)

    @staticmethod
    def from_generator(generator: Callable[[], Iterable]) -> Dataset:
        """The elements that `generator()` yields; each pass calls it again.

        Cardinality is unknown, so `len()` raises TypeError.

        >>> import tapeflow as tp
        >>> ds = tp.data.Dataset.from_generator(lambda: ((i, i * i) for i in range(3)))
        >>> [(int(a), int(b)) for a, b in ds]
        [(0, 0), (1, 1), (2, 4)]
        """
        return _FromGenerator(generator)

    # ----- transformations -----
    def shuffle(self, buffer_size: int, seed: int | None = None, reshuffle_each_iteration: bool = True) -> Dataset:
        """Shuffle through a buffer of `buffer_size` elements, as tf.data does.

        The buffer starts with the first `buffer_size` elements; each output is drawn
        uniformly from it and its slot refilled from the input. A buffer at least as large
        as the dataset gives a uniform permutation. With `seed=None` the seed is drawn from
        tapeflow's global stream, so `tp.random.seed(...)` makes pipelines reproducible.
        Each pass reshuffles unless `reshuffle_each_iteration=False`.

        >>> import tapeflow as tp
        >>> ds = tp.data.Dataset.from_tensor_slices(list(range(6))).shuffle(6, seed=1)
        >>> a, b = [int(v) for v in ds], [int(v) for v in ds]
        >>> sorted(a) == list(range(6)), a != b
        (True, True)
        """
        return _Shuffle(self, buffer_size, seed, reshuffle_each_iteration)

    def batch(self, batch_size: int, drop_remainder: bool = False) -> Dataset:
        """Stack `batch_size` consecutive elements into one, component by component.

        The last batch is smaller unless `drop_remainder=True` drops it.

        >>> import numpy as np
        >>> import tapeflow as tp
        >>> ds = tp.data.Dataset.from_tensor_slices(np.arange(5))
        >>> [b.tolist() for b in ds.batch(2)], [b.tolist() for b in ds.batch(2, drop_remainder=True)]
        ([[0, 1], [2, 3], [4]], [[0, 1], [2, 3]])
        """
        return _Batch(self, batch_size, drop_remainder)

    def map(self, fn: Callable, num_parallel_calls: int | None = None) -> Dataset:
        """Apply `fn` to each element; a tuple element is passed as `fn(*parts)`.

        `fn` gets NumPy values and may return NumPy arrays, tapeflow tensors or Python
        numbers (or tuples / dicts of them). With `num_parallel_calls=k > 1` (or
        `AUTOTUNE`, meaning `os.cpu_count()`) up to k calls run at once on threads,
        and the output keeps the input order; `fn` must then be thread-safe.

        >>> import numpy as np
        >>> import tapeflow as tp
        >>> ds = tp.data.Dataset.from_tensor_slices((np.arange(3), np.arange(3)))
        >>> [int(v) for v in ds.map(lambda a, b: a + 10 * b, num_parallel_calls=2)]
        [0, 11, 22]
        """
        return _Map(self, fn, num_parallel_calls)

    def prefetch(self, buffer_size: int) -> Dataset:
        """Compute up to `buffer_size` elements ahead on a background thread.

        Input work then overlaps the training step that consumes it. An exception in
        the pipeline is raised to the consumer; closing the iterator (or dropping it,
        or leaving a `for` loop early) stops the thread.

        >>> import tapeflow as tp
        >>> ds = tp.data.Dataset.from_tensor_slices([1, 2, 3]).prefetch(2)
        >>> [int(v) for v in ds]
        [1, 2, 3]
        """
        return _Prefetch(self, buffer_size)

    def repeat(self, count: int | None = None) -> Dataset:
        """Pass over the dataset `count` times (forever if None or -1); each pass is fresh.

        >>> import tapeflow as tp
        >>> [int(v) for v in tp.data.Dataset.from_tensor_slices([1, 2]).repeat(2)]
        [1, 2, 1, 2]
        """
        return _Repeat(self, count)

    def take(self, count: int) -> Dataset:
        """At most the first `count` elements (all of them if -1).

        >>> import tapeflow as tp
        >>> [int(v) for v in tp.data.Dataset.from_tensor_slices([1, 2]).repeat().take(3)]
        [1, 2, 1]
        """
        return _Take(self, count)

    # ----- iteration and size -----
    def __iter__(self) -> Iterator:
        """A fresh pass over the elements, as tensors (as tf.data gives them; NumPy reads
        them as arrays). Text stays in NumPy arrays: tapeflow has no string tensors.

        >>> import tapeflow as tp
        >>> batch = next(iter(tp.data.Dataset.from_tensor_slices([1.0, 2.0, 3.0]).batch(2)))
        >>> type(batch).__name__, batch.numpy().tolist()
        ('Tensor', [1.0, 2.0])
        """
        return _tensor_elements(self._elements())

    def as_numpy_iterator(self) -> Iterator:
        """A fresh pass over the elements, as NumPy arrays.

        >>> import tapeflow as tp
        >>> [a.tolist() for a in tp.data.Dataset.from_tensor_slices([1, 2, 3]).batch(2).as_numpy_iterator()]
        [[1, 2], [3]]
        """
        return self._elements()

    def cardinality(self) -> int:
        """The number of elements, or INFINITE_CARDINALITY (-1) or UNKNOWN_CARDINALITY (-2).

        >>> import tapeflow as tp
        >>> ds = tp.data.Dataset.from_tensor_slices([1, 2, 3])
        >>> ds.cardinality(), ds.repeat().cardinality(), ds.batch(2).cardinality()
        (3, -1, 2)
        """
        return self._cardinality

    def __len__(self) -> int:
        if self._cardinality == INFINITE_CARDINALITY:
            raise TypeError(f"len: {self!r} is infinite")
        if self._cardinality == UNKNOWN_CARDINALITY:
            raise TypeError(f"len: the length of {self!r} is unknown")
        return self._cardinality

    def __bool__(self) -> bool:
        return True  # not len() != 0, which raises for infinite datasets

    def __repr__(self) -> str:
        n = self._cardinality
        size = {INFINITE_CARDINALITY: "infinite", UNKNOWN_CARDINALITY: "unknown size"}.get(n, f"{n} elements")
        return f"<Dataset {self._chain()}: {size}>"

    # ----- the protocol each subclass implements -----
    def _chain(self) -> str:
        return f"{self._input._chain()}.{self._describe()}"

    def _describe(self) -> str:
        raise NotImplementedError

    def _elements(self) -> Iterator:
        """A fresh iterator over the elements."""
        if self._slices is not None:
            return self._slices._elements_at(self._indices())
        return self._transform(self._input._elements)

    def _indices(self) -> Iterator[int]:
        """A fresh iterator over row indices into `self._slices` (only when that is set)."""
        return self._transform(self._input._indices)

    def _transform(self, make_input: Callable[[], Iterator]) -> Iterator:
        """This stage applied to a stream that `make_input()` starts: elements or indices alike."""
        raise NotImplementedError


# ----- elements: tuples (named too) and dicts of components, as `tapeflow.tree` nests them;
# a list is one component (array data), not a structure -----
def _is_component(value) -> bool:
    return isinstance(value, list)


def _flatten(element) -> list:
    return tree.flatten(element, is_leaf=_is_component)


def _pack(structure, components: Iterable):
    """`structure` with its components replaced, in `_flatten` order, by `components`."""
    return tree.pack_sequence_as(structure, components, is_leaf=_is_component)


def _paths(structure) -> list[str]:
    """A name for each component, in `_flatten` order: "[0]", "['image']", "[1]['a']"."""
    found = tree.flatten_with_path(structure, is_leaf=_is_component)
    return ["".join(f"[{key!r}]" for key in path) or "tensors" for path, _ in found]


def _to_numpy(structure, where: str):
    """`structure` with each leaf as a NumPy array (NumPy scalars stay as they are)."""
    leaves = []
    for leaf in _flatten(structure):
        if not isinstance(leaf, np.ndarray | np.generic):
            array = np.asarray(leaf)
            if array.dtype == object:
                raise TypeError(f"{where}: an element component of type {type(leaf).__name__} is not array-like")
            leaf = array
        leaves.append(leaf)
    return _pack(structure, iter(leaves))


def _tensor_elements(elements: Iterator) -> Iterator:
    """`elements` with their numeric leaves as Tensors; closing it closes `elements`."""
    with _closing(elements):
        for element in elements:
            yield _as_tensors(element)


def _as_tensors(structure):
    """`structure` with each numeric NumPy leaf as a Tensor (text and objects stay arrays)."""
    leaves = [as_tensor(leaf) if np.asarray(leaf).dtype.kind in "biuf" else leaf for leaf in _flatten(structure)]
    return _pack(structure, iter(leaves))


def _stack(elements: list, where: str):
    """One element whose components stack those of `elements` along a new axis 0."""
    template = elements[0]
    flat = [_flatten(e) for e in elements]
    if any(len(leaves) != len(flat[0]) for leaves in flat):
        raise ValueError(f"{where}: elements in one batch have different structures, e.g. {template!r}")
    columns = list(zip(*flat, strict=True))
    try:
        return _pack(template, (np.stack(column) for column in columns))
    except ValueError:
        for path, column in zip(_paths(template), columns, strict=True):
            shapes = sorted({np.shape(v) for v in column})
            if len(shapes) > 1:
                raise ValueError(
                    f"{where}: component {path} has different shapes within one batch: "
                    f"{', '.join(map(str, shapes))}; make them equal in a map() first"
                ) from None
        raise


@contextmanager
def _closing(iterator: Iterator):
    """Close `iterator` on exit (if it can be), so upstream threads stop promptly."""
    try:
        yield iterator
    finally:
        close = getattr(iterator, "close", None)
        if close is not None:
            close()


def _positive_int(value, what: str, where: str) -> int:
    if isinstance(value, bool) or not isinstance(value, int | np.integer) or value < 1:
        raise ValueError(f"{where}: {what} must be a positive integer, got {value!r}")
    return int(value)


# ----- sources -----
class _TensorSlices(Dataset):
    def __init__(self, tensors):
        super().__init__()
        where = "Dataset.from_tensor_slices"
        leaves = _flatten(tensors)
        if not leaves:
            raise ValueError(f"{where}: got an empty structure {tensors!r}; give at least one array")
        arrays = []
        for path, leaf in zip(_paths(tensors), leaves, strict=True):
            array = np.asarray(leaf)
            if array.dtype == object:
                raise TypeError(f"{where}: component {path} of type {type(leaf).__name__} is not a regular array")
            if array.ndim == 0:
                raise ValueError(f"{where}: component {path} is a scalar; slicing needs at least one axis")
            array = array.view()
            array.flags.writeable = False  # elements are views: keep the caller's data intact
            arrays.append(array)
        lengths = {a.shape[0] for a in arrays}
        if len(lengths) > 1:
            shapes = ", ".join(f"{p}: {a.shape}" for p, a in zip(_paths(tensors), arrays, strict=True))
            raise ValueError(f"{where}: all components need the same length along axis 0, got shapes {shapes}")
        self._structure = tensors
        self._arrays = arrays
        self._cardinality = arrays[0].shape[0]
        self._slices = self

    def _chain(self) -> str:
        shapes = _pack(self._structure, (a.shape for a in self._arrays))
        return f"from_tensor_slices({shapes})"

    def _indices(self) -> Iterator[int]:
        return iter(range(self._cardinality))

    def _elements_at(self, indices: Iterator[int]) -> Iterator:
        with _closing(indices):
            for i in indices:
                yield _pack(self._structure, (a[i] for a in self._arrays))

    def _gather(self, indices: np.ndarray):
        return _pack(self._structure, (np.take(a, indices, axis=0) for a in self._arrays))


class _FromGenerator(Dataset):
    def __init__(self, generator):
        super().__init__()
        if not callable(generator):
            raise TypeError(
                f"Dataset.from_generator: pass a function that returns an iterable (so each pass "
                f"restarts it), got {type(generator).__name__}"
            )
        self._generator = generator

    def _chain(self) -> str:
        return f"from_generator({getattr(self._generator, '__name__', 'generator')})"

    def _elements(self) -> Iterator:
        with _closing(iter(self._generator())) as items:
            for item in items:
                yield _to_numpy(item, "Dataset.from_generator")


# ----- transformations on elements or indices alike -----
class _Shuffle(Dataset):
    def __init__(self, input_dataset, buffer_size, seed, reshuffle_each_iteration):
        super().__init__(input_dataset)
        self._buffer_size = _positive_int(buffer_size, "buffer_size", "Dataset.shuffle")
        if seed is None:
            seed = int(global_generator().numpy.integers(2**63))
        if isinstance(seed, bool) or not isinstance(seed, int | np.integer) or seed < 0:
            raise ValueError(f"Dataset.shuffle: seed must be None or an integer >= 0, got {seed!r}")
        self._seed = int(seed)
        self._reshuffle = bool(reshuffle_each_iteration)
        self._passes = 0  # a plain count, so a pipeline copies and pickles with its position
        self._cardinality = input_dataset._cardinality
        self._slices = input_dataset._slices

    def _describe(self) -> str:
        return f"shuffle({self._buffer_size})"

    def _transform(self, make_input):
        epoch, self._passes = (self._passes, self._passes + 1) if self._reshuffle else (0, 0)
        rng = np.random.default_rng([self._seed, epoch])
        with _closing(make_input()) as items:
            yield from _buffer_shuffle(items, self._buffer_size, rng)


def _buffer_shuffle(items: Iterator, size: int, rng: np.random.Generator) -> Iterator:
    """tf.data's shuffle: draw each output uniformly from a buffer refilled from `items`."""
    buffer = list(islice(items, size))
    draws = (j for _ in itertools.count() for j in rng.integers(0, size, _DRAW_BLOCK).tolist())
    for item in items:  # only reached with a full buffer
        j = next(draws)
        yield buffer[j]
        buffer[j] = item
    # Drain: a Fisher-Yates pass over what is left, step k drawing from the n - k remaining.
    for j in rng.integers(0, np.arange(len(buffer), 0, -1)).tolist():
        yield buffer[j]
        buffer[j] = buffer[-1]
        buffer.pop()


class _Repeat(Dataset):
    def __init__(self, input_dataset, count):
        super().__init__(input_dataset)
        if count is not None and (isinstance(count, bool) or not isinstance(count, int | np.integer) or count < -1):
            raise ValueError(f"Dataset.repeat: count must be None, -1 or a count >= 0, got {count!r}")
        self._count = None if count is None or count == -1 else int(count)
        n = input_dataset._cardinality
        if self._count is None:
            self._cardinality = n if n in (0, UNKNOWN_CARDINALITY) else INFINITE_CARDINALITY
        else:
            self._cardinality = 0 if self._count == 0 else (n * self._count if n >= 0 else n)
        self._slices = input_dataset._slices

    def _describe(self) -> str:
        return f"repeat({'' if self._count is None else self._count})"

    def _transform(self, make_input):
        passes = itertools.count() if self._count is None else range(self._count)
        for _ in passes:
            empty = True
            with _closing(make_input()) as items:
                for item in items:
                    empty = False
                    yield item
            if empty:  # repeating an empty pass would loop forever
                return


class _Take(Dataset):
    def __init__(self, input_dataset, count):
        super().__init__(input_dataset)
        if isinstance(count, bool) or not isinstance(count, int | np.integer) or count < -1:
            raise ValueError(f"Dataset.take: count must be -1 or a count >= 0, got {count!r}")
        self._count = None if count == -1 else int(count)
        n = input_dataset._cardinality
        if self._count is None or n == UNKNOWN_CARDINALITY:
            self._cardinality = n
        else:
            self._cardinality = self._count if n == INFINITE_CARDINALITY else min(n, self._count)
        self._slices = input_dataset._slices

    def _describe(self) -> str:
        return f"take({-1 if self._count is None else self._count})"

    def _transform(self, make_input):
        if self._count == 0:
            return  # start nothing upstream
        with _closing(make_input()) as items:
            yield from islice(items, self._count)


# ----- transformations on elements -----
class _Batch(Dataset):
    def __init__(self, input_dataset, batch_size, drop_remainder):
        super().__init__(input_dataset)
        self._size = _positive_int(batch_size, "batch_size", "Dataset.batch")
        self._drop = bool(drop_remainder)
        n = input_dataset._cardinality
        if n < 0:
            self._cardinality = n
        else:
            self._cardinality = n // self._size if self._drop else -(-n // self._size)

    def _describe(self) -> str:
        return f"batch({self._size}{', drop_remainder=True' if self._drop else ''})"

    def _elements(self):
        source = self._input._slices
        by_index = source is not None
        with _closing(self._input._indices() if by_index else self._input._elements()) as items:
            while True:
                if by_index:
                    group = np.fromiter(islice(items, self._size), dtype=np.intp)
                else:
                    group = list(islice(items, self._size))
                if len(group) == 0 or (self._drop and len(group) < self._size):
                    return
                yield source._gather(group) if by_index else _stack(group, "Dataset.batch")


class _Map(Dataset):
    def __init__(self, input_dataset, fn, num_parallel_calls):
        super().__init__(input_dataset)
        if not callable(fn):
            raise TypeError(f"Dataset.map: fn must be callable, got {type(fn).__name__}")
        self._fn = fn
        if num_parallel_calls is None:
            self._workers = 1
        elif num_parallel_calls == AUTOTUNE:
            self._workers = os.cpu_count() or 1
        else:
            self._workers = _positive_int(num_parallel_calls, "num_parallel_calls", "Dataset.map")
        self._cardinality = input_dataset._cardinality

    def _describe(self) -> str:
        parallel = f", num_parallel_calls={self._workers}" if self._workers > 1 else ""
        return f"map({getattr(self._fn, '__name__', 'fn')}{parallel})"

    def _apply(self, element):
        out = self._fn(*element) if isinstance(element, tuple) else self._fn(element)
        return _to_numpy(out, "Dataset.map")

    def _elements(self):
        with _closing(self._input._elements()) as elements:
            if self._workers == 1:
                for element in elements:
                    yield self._apply(element)
                return
            # Keep `workers` calls in flight and hand results out in input order.
            pool = ThreadPoolExecutor(self._workers, thread_name_prefix="tapeflow-map")
            pending = deque()
            try:
                for element in elements:
                    pending.append(pool.submit(self._apply, element))
                    if len(pending) == self._workers:
                        yield pending.popleft().result()
                while pending:
                    yield pending.popleft().result()
            finally:
                pool.shutdown(wait=True, cancel_futures=True)


class _Prefetch(Dataset):
    def __init__(self, input_dataset, buffer_size):
        super().__init__(input_dataset)
        if buffer_size == AUTOTUNE:
            buffer_size = _AUTOTUNE_PREFETCH
        self._buffer_size = _positive_int(buffer_size, "buffer_size", "Dataset.prefetch")
        self._cardinality = input_dataset._cardinality

    def _describe(self) -> str:
        return f"prefetch({self._buffer_size})"

    def _elements(self):
        return _PrefetchIterator(self._input, self._buffer_size)


_ITEM, _END, _ERROR = "item", "end", "error"


def _produce(dataset: Dataset, out: queue.Queue, stop: threading.Event) -> None:
    """The prefetch thread: run `dataset` into `out` until it ends, fails, or `stop` is set.

    It holds no reference to its iterator, so dropping that iterator can stop it.
    """
    try:
        with _closing(dataset._elements()) as elements:
            for element in elements:
                out.put((_ITEM, element))
                if stop.is_set():  # checked after the put, so no element is computed after a stop
                    return
        message = (_END, None)
    except BaseException as err:  # handed to the consumer, which raises it
        message = (_ERROR, err)
    if not stop.is_set():
        out.put(message)


class _PrefetchIterator:
    """The consumer's end of a prefetch queue; `close()` (or dropping it) stops the producer."""

    def __init__(self, dataset: Dataset, buffer_size: int):
        self._queue = queue.Queue(buffer_size)
        self._stop = threading.Event()
        self._done = False
        self._thread = threading.Thread(
            target=_produce, args=(dataset, self._queue, self._stop), name="tapeflow-prefetch", daemon=True
        )
        self._thread.start()

    def __iter__(self):
        return self

    def __next__(self):
        if self._done:
            raise StopIteration
        kind, value = self._queue.get()
        if kind == _ITEM:
            return value
        self._done = True
        self._thread.join()
        if kind == _ERROR:
            raise value
        raise StopIteration

    def close(self) -> None:
        """Stop the producer thread and wait for it to end."""
        if self._done:
            return
        self._done = True
        self._stop.set()
        # The producer puts at most once after `stop` is set; emptying the queue lets that put through.
        while True:
            try:
                self._queue.get_nowait()
            except queue.Empty:
                break
        self._thread.join()

    def __del__(self):
        if not sys.is_finalizing() and hasattr(self, "_thread"):
            self.close()
