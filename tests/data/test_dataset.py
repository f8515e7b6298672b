"""tp.data.Dataset against NumPy references, and its threads against events, never the clock."""

import collections
import threading
import time

import numpy as np
import pytest
import scipy.stats

import tapeflow as tp
from tapeflow.data import dataset as dataset_module

Dataset = tp.data.Dataset


def as_lists(ds):
    """Every element of `ds` as nested Python lists, for exact comparisons."""
    return [
        tuple(np.asarray(part).tolist() for part in e) if isinstance(e, tuple) else np.asarray(e).tolist() for e in ds
    ]


@pytest.fixture
def xy(rng):
    return rng.normal(size=(23, 3)).astype("float32"), np.arange(23) % 5


# ----- from_tensor_slices -----
def test_slices_of_tuple_yield_tensor_rows_and_numpy_rows_on_request(xy):
    x, y = xy
    elements = list(Dataset.from_tensor_slices((x, y)))
    assert len(elements) == 23
    for i, (xi, yi) in enumerate(elements):
        assert isinstance(xi, tp.Tensor) and isinstance(yi, tp.Tensor)
        np.testing.assert_array_equal(xi.numpy(), x[i])
        assert int(yi) == y[i]
    for i, (xi, yi) in enumerate(Dataset.from_tensor_slices((x, y)).as_numpy_iterator()):
        assert isinstance(xi, np.ndarray) and isinstance(yi, np.generic)
        np.testing.assert_array_equal(xi, x[i])
        assert yi == y[i]


def test_slices_keep_dicts_nested_tuples_and_namedtuples(xy):
    x, y = xy
    pair = collections.namedtuple("Pair", "image label")
    ds = Dataset.from_tensor_slices(({"image": x, "meta": (y, y * 2)}, pair(x, y)))
    first = next(iter(ds))
    assert set(first[0]) == {"image", "meta"}
    np.testing.assert_array_equal(first[0]["image"], x[0])
    assert first[0]["meta"] == (y[0], 2 * y[0])
    assert isinstance(first[1], pair) and first[1].label == y[0]


def test_slices_accept_tapeflow_tensors_and_lists():
    t = tp.tensor([[1.0, 2.0], [3.0, 4.0]])
    assert as_lists(Dataset.from_tensor_slices(t)) == [[1.0, 2.0], [3.0, 4.0]]
    assert as_lists(Dataset.from_tensor_slices(([1, 2], t))) == [(1, [1.0, 2.0]), (2, [3.0, 4.0])]


def test_mismatched_lengths_name_the_shapes(xy):
    x, y = xy
    with pytest.raises(ValueError, match=r"\[0\]: \(23, 3\), \[1\]: \(22,\)"):
        Dataset.from_tensor_slices((x, y[:-1]))
    with pytest.raises(ValueError, match=r"\['b'\]: \(4,\)"):
        Dataset.from_tensor_slices({"a": x, "b": np.zeros(4)})
    with pytest.raises(ValueError, match="scalar"):
        Dataset.from_tensor_slices((x, np.float32(1.0)))
    with pytest.raises(ValueError, match="empty"):
        Dataset.from_tensor_slices(())


def test_pipeline_never_writes_to_the_source(xy):
    x, y = xy
    before = x.copy()
    ds = Dataset.from_tensor_slices((x, y))
    row, _ = next(ds.as_numpy_iterator())
    with pytest.raises(ValueError, match="read-only"):
        row += 1
    xb, _ = next(ds.batch(4).as_numpy_iterator())
    xb += 1  # batches are fresh arrays
    np.testing.assert_array_equal(x, before)


def test_iterating_twice_gives_two_full_passes(xy):
    ds = Dataset.from_tensor_slices(xy).map(lambda a, b: b).batch(5)
    assert as_lists(ds) == as_lists(ds) == [list(range(5))] * 4 + [[0, 1, 2]]


# ----- shuffle -----
def test_shuffle_is_a_permutation_reproducible_by_seed():
    n = 50
    ds = Dataset.from_tensor_slices(np.arange(n))
    for buffer_size in (1, 7, n, 10 * n):
        order = as_lists(ds.shuffle(buffer_size, seed=3))
        assert sorted(order) == list(range(n))
        assert order == as_lists(ds.shuffle(buffer_size, seed=3))
    assert as_lists(ds.shuffle(1, seed=3)) == list(range(n))  # a one-element buffer changes nothing
    assert as_lists(ds.shuffle(n, seed=3)) != as_lists(ds.shuffle(n, seed=4))


def test_shuffle_reshuffles_each_pass_unless_told_not_to():
    ds = Dataset.from_tensor_slices(np.arange(30))
    reshuffled = ds.shuffle(30, seed=0)
    assert as_lists(reshuffled) != as_lists(reshuffled)
    fixed = ds.shuffle(30, seed=0, reshuffle_each_iteration=False)
    assert as_lists(fixed) == as_lists(fixed)
    epochs = as_lists(ds.shuffle(30, seed=0).repeat(2))
    assert sorted(epochs[:30]) == sorted(epochs[30:]) == list(range(30))
    assert epochs[:30] != epochs[30:]


def test_shuffle_without_seed_follows_the_global_seed():
    ds = Dataset.from_tensor_slices(np.arange(20))
    tp.random.seed(11)
    first = as_lists(ds.shuffle(20))
    tp.random.seed(11)
    assert as_lists(ds.shuffle(20)) == first


def test_shuffle_buffer_bounds_how_far_ahead_an_element_can_come_from():
    # With a buffer of B, output position p can only hold one of the first p + B inputs.
    n, buffer_size = 40, 4
    ds = Dataset.from_tensor_slices(np.arange(n))
    for seed in range(20):
        order = as_lists(ds.shuffle(buffer_size, seed=seed))
        assert all(value < position + buffer_size for position, value in enumerate(order))


def test_shuffle_draws_uniformly():
    # Full buffer: all 24 orders of 4 elements are equally likely.
    ds = Dataset.from_tensor_slices(np.arange(4))
    counts = collections.Counter(tuple(as_lists(ds.shuffle(4, seed=s))) for s in range(2400))
    assert len(counts) == 24
    assert scipy.stats.chisquare(list(counts.values())).pvalue > 1e-4
    # Bounded buffer: the first output is uniform over the first `buffer_size` inputs.
    ds = Dataset.from_tensor_slices(np.arange(10))
    firsts = collections.Counter(int(next(iter(ds.shuffle(3, seed=s)))) for s in range(1500))
    assert set(firsts) == {0, 1, 2}
    assert scipy.stats.chisquare(list(firsts.values())).pvalue > 1e-4


# ----- batch -----
@pytest.mark.parametrize("drop_remainder, sizes", [(False, [5, 5, 5, 5, 3]), (True, [5, 5, 5, 5])])
def test_batch_sizes_and_remainder(xy, drop_remainder, sizes):
    x, y = xy
    ds = Dataset.from_tensor_slices((x, y)).batch(5, drop_remainder=drop_remainder)
    batches = list(ds)
    assert [len(b[0]) for b in batches] == [len(b[1]) for b in batches] == sizes
    assert len(ds) == len(sizes)
    np.testing.assert_array_equal(np.concatenate([b[0] for b in batches]), x[: sum(sizes)])


def test_gathered_batches_match_stacking_the_shuffled_elements(xy):
    x, y = xy
    base = Dataset.from_tensor_slices({"x": x, "y": y})
    # Fresh pipelines each time: a second pass over the same shuffle would reshuffle.
    for make in (lambda: base.shuffle(7, seed=5), lambda: base.shuffle(7, seed=5).repeat(2).take(40)):
        elements = list(make())
        batches = list(make().batch(6))
        assert len(batches) == -(-len(elements) // 6)
        for k, batch in enumerate(batches):
            chunk = elements[6 * k : 6 * k + 6]
            np.testing.assert_array_equal(batch["x"], np.stack([e["x"] for e in chunk]))
            np.testing.assert_array_equal(batch["y"], np.array([e["y"] for e in chunk]))
    # The element-by-element path (after a map) shuffles and batches to the same result.
    fast = list(base.shuffle(7, seed=5).batch(6))
    slow = list(base.map(lambda e: e).shuffle(7, seed=5).batch(6))
    for a, b in zip(fast, slow, strict=True):
        np.testing.assert_array_equal(a["x"], b["x"])
        np.testing.assert_array_equal(a["y"], b["y"])


def test_batch_after_shuffle_gathers_without_per_element_work(xy, monkeypatch):
    def per_element(*_):
        raise AssertionError("batch took the element-by-element path")

    monkeypatch.setattr(dataset_module._TensorSlices, "_elements_at", per_element)
    batches = list(Dataset.from_tensor_slices(xy).shuffle(100, seed=0).repeat(2).batch(8))
    assert sorted(np.concatenate([b[1] for b in batches]).tolist()) == sorted(2 * xy[1].tolist())


def test_batch_of_ragged_elements_names_the_component():
    ds = Dataset.from_generator(lambda: ((np.zeros(k), k) for k in (2, 2, 3)))
    with pytest.raises(ValueError, match=r"component \[0\] has different shapes.*\(2,\), \(3,\)"):
        list(ds.batch(3))
    mixed = Dataset.from_generator(lambda: iter([(1, 2), (3,)]))
    with pytest.raises(ValueError, match="different structures"):
        list(mixed.batch(2))


# ----- map -----
def test_map_unpacks_tuples_and_converts_results(xy):
    x, y = xy
    ds = Dataset.from_tensor_slices((x, y)).map(lambda a, b: (tp.tensor(a) * 2.0, int(b) + 1))
    for (a, b), xi, yi in zip(ds.as_numpy_iterator(), x, y, strict=True):
        assert isinstance(a, np.ndarray) and isinstance(b, np.ndarray)
        np.testing.assert_allclose(a, xi * 2.0)
        assert b == yi + 1
    with pytest.raises(TypeError, match="NoneType"):
        list(Dataset.from_tensor_slices(y).map(lambda v: None))


def test_parallel_map_runs_calls_at_once_and_keeps_order():
    both_running = threading.Barrier(2, timeout=10)  # passes only if two calls overlap
    threads = set()

    def work(v):
        threads.add(threading.get_ident())
        if v < 2:
            both_running.wait()
        time.sleep(0.002 * (20 - int(v)))  # later elements finish first
        return v * 10

    out = as_lists(Dataset.from_tensor_slices(np.arange(20)).map(work, num_parallel_calls=4))
    assert out == [10 * v for v in range(20)]
    assert len(threads) > 1 and threading.get_ident() not in threads
    auto = Dataset.from_tensor_slices(np.arange(20)).map(lambda v: -v, num_parallel_calls=tp.data.AUTOTUNE)
    assert as_lists(auto) == [-v for v in range(20)]


def test_parallel_map_raises_the_callers_error_and_stops_its_threads():
    baseline = threading.active_count()

    def work(v):
        if v == 7:
            raise KeyError("bad record 7")
        return v

    with pytest.raises(KeyError, match="bad record 7"):
        list(Dataset.from_tensor_slices(np.arange(20)).map(work, num_parallel_calls=3))
    assert threading.active_count() == baseline


# ----- prefetch -----
def test_prefetch_runs_ahead_while_the_consumer_is_busy():
    buffer_size = 3
    produced, producer_threads = [], set()
    ran_ahead = threading.Event()

    def source():
        for i in range(12):
            time.sleep(0.005)  # input work
            produced.append(i)
            producer_threads.add(threading.get_ident())
            if i == buffer_size + 1:
                ran_ahead.set()
            yield i

    plain = iter(Dataset.from_generator(source))
    assert next(plain) == 0 and produced == [0]  # without prefetch, nothing happens between calls
    plain.close()

    produced.clear()
    producer_threads.clear()
    it = iter(Dataset.from_generator(source).prefetch(buffer_size))
    assert next(it) == 0
    # The consumer now "trains" on element 0; meanwhile the producer works through the next ones.
    assert ran_ahead.wait(timeout=10)
    time.sleep(0.05)
    # ...but no further than the queue allows: 1 consumed + 3 queued + 1 waiting to be put.
    assert len(produced) == 1 + buffer_size + 1
    assert producer_threads and threading.get_ident() not in producer_threads
    assert list(it) == list(range(1, 12))


def test_prefetch_hands_the_producers_exception_to_the_consumer():
    baseline = threading.active_count()

    def source():
        yield 1
        yield 2
        raise RuntimeError("disk on fire")

    it = iter(Dataset.from_generator(source).prefetch(2))
    assert [next(it), next(it)] == [1, 2]
    with pytest.raises(RuntimeError, match="disk on fire"):
        next(it)
    assert threading.active_count() == baseline
    with pytest.raises(StopIteration):
        next(it)


def _slow(v):
    time.sleep(0.002)
    return v


def _stop_by_close(ds):
    it = iter(ds)
    next(it)
    it.close()


def _stop_by_break(ds):
    for _ in ds:
        break


def _stop_by_dropping(ds):
    it = iter(ds)
    next(it)
    del it


def _stop_before_starting(ds):
    iter(ds)


def _stop_by_take(ds):
    assert len(list(ds.take(3))) == 3


@pytest.mark.parametrize(
    "stop", [_stop_by_close, _stop_by_break, _stop_by_dropping, _stop_before_starting, _stop_by_take]
)
def test_stopping_early_ends_every_thread(stop):
    baseline = threading.active_count()
    endless = Dataset.from_tensor_slices(np.arange(100)).repeat().map(_slow, num_parallel_calls=2)
    stop(endless.prefetch(2).map(_slow).batch(2).prefetch(1))
    assert threading.active_count() == baseline


# ----- repeat, take, cardinality -----
def test_repeat_and_take():
    ds = Dataset.from_tensor_slices(np.array([1, 2, 3]))
    assert as_lists(ds.repeat(2)) == [1, 2, 3, 1, 2, 3]
    assert as_lists(ds.repeat().take(7)) == [1, 2, 3, 1, 2, 3, 1]
    assert as_lists(ds.take(2)) == [1, 2] and as_lists(ds.take(10)) == [1, 2, 3] and as_lists(ds.take(-1)) == [1, 2, 3]
    assert as_lists(ds.repeat(0)) == as_lists(ds.take(0)) == []
    assert as_lists(ds.take(0).repeat()) == []  # an empty pass ends an endless repeat


def test_cardinality_and_len():
    ds = Dataset.from_tensor_slices(np.arange(10))
    assert len(ds) == 10 and len(ds.batch(3)) == 4 and len(ds.batch(3, drop_remainder=True)) == 3
    assert len(ds.shuffle(4).map(abs).prefetch(2)) == 10
    assert len(ds.repeat(3)) == 30 and len(ds.repeat().take(25)) == 25 and len(ds.take(25)) == 10
    assert ds.repeat().cardinality() == tp.data.INFINITE_CARDINALITY
    generated = Dataset.from_generator(lambda: range(3))
    assert generated.cardinality() == tp.data.UNKNOWN_CARDINALITY
    with pytest.raises(TypeError, match="infinite"):
        len(ds.repeat().batch(2))
    with pytest.raises(TypeError, match="unknown"):
        len(generated.take(2))
    assert bool(ds.take(0)) and bool(ds.repeat())
    assert repr(ds.batch(3)) == "<Dataset from_tensor_slices((10,)).batch(3): 4 elements>"


@pytest.mark.parametrize(
    "make, error",
    [
        (lambda ds: ds.batch(0), ValueError),
        (lambda ds: ds.shuffle(0), ValueError),
        (lambda ds: ds.shuffle(4, seed=-1), ValueError),
        (lambda ds: ds.prefetch(0), ValueError),
        (lambda ds: ds.map(abs, num_parallel_calls=0), ValueError),
        (lambda ds: ds.take(-2), ValueError),
        (lambda ds: ds.repeat(-3), ValueError),
        (lambda ds: ds.map("abs"), TypeError),
        (lambda ds: Dataset.from_generator(iter(range(3))), TypeError),
    ],
)
def test_bad_arguments_are_rejected(make, error):
    with pytest.raises(error):
        make(Dataset.from_tensor_slices(np.arange(4)))
