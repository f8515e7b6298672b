"""The eager queues against TensorFlow's semantics: order, shuffling, capacity, closing,
timeouts, padding, named components, and threads on both ends."""

from __future__ import annotations

import threading
import time

import numpy as np
import pytest
from scipy import stats

import tapeflow as tp
from tapeflow.queue import CancelledError, DeadlineExceededError, OutOfRangeError

WAIT = 10.0  # seconds any thread in these tests may wait before the test fails


def _run(target, *args):
    """`target(*args)` in a thread; returns (thread, box) where box holds its result or error."""
    box = {}

    def work():
        try:
            box["result"] = target(*args)
        except BaseException as err:  # noqa: BLE001 - handed to the test
            box["error"] = err

    thread = threading.Thread(target=work, daemon=True)
    thread.start()
    return thread, box


def test_fifo_order_single_and_many():
    q = tp.queue.FIFOQueue(10, "int64", shapes=())
    q.enqueue(0)
    q.enqueue_many([1, 2, 3])
    q.enqueue(np.int64(4))
    assert [int(q.dequeue()) for _ in range(2)] == [0, 1]
    assert q.dequeue_many(3).numpy().tolist() == [2, 3, 4]
    assert q.size() == 0


def test_components_keep_their_dtypes_and_shapes():
    q = tp.queue.FIFOQueue(4, ["float32", "int32"], shapes=[(2, 3), ()])
    q.enqueue([np.ones((2, 3), np.float32), 5])
    x, y = q.dequeue()
    assert (x.dtype, x.shape, y.dtype, y.shape) == (tp.float32, (2, 3), tp.int32, ())
    q.enqueue_many([np.zeros((3, 2, 3), np.float32), [1, 2, 3]])
    xs, ys = q.dequeue_many(3)
    assert xs.shape == (3, 2, 3) and ys.numpy().tolist() == [1, 2, 3]


def test_named_components_are_dicts():
    q = tp.queue.FIFOQueue(2, ["float32", "int64"], shapes=[(), ()], names=["x", "label"])
    q.enqueue({"x": 1.5, "label": 3})
    out = q.dequeue()
    assert set(out) == {"x", "label"} and float(out["x"]) == 1.5 and int(out["label"]) == 3
    with pytest.raises(ValueError, match="expected a dict with keys"):
        q.enqueue([1.0, 2])


def test_an_enqueued_array_is_copied():
    q = tp.queue.FIFOQueue(2, "float64")
    a = np.zeros(3)
    q.enqueue(a)
    a[:] = 7.0
    assert q.dequeue().numpy().tolist() == [0.0, 0.0, 0.0]


@pytest.mark.parametrize(
    "vals, error, match",
    [
        (np.zeros(3, np.float64), TypeError, "component 0 must be float32, got float64"),
        (np.zeros(4, np.float32), ValueError, r"component 0 must have shape \(3,\), got \(4,\)"),
        ("text", ValueError, "component 0 is not a float32 array"),
    ],
)
def test_bad_elements_are_refused_naming_the_queue(vals, error, match):
    q = tp.queue.FIFOQueue(2, "float32", shapes=(3,), name="inputs")
    with pytest.raises(error, match=f"{q.name}: enqueue: {match}"):
        q.enqueue(vals)
    assert q.size() == 0


@pytest.mark.parametrize(
    "make, match",
    [
        (lambda: tp.queue.FIFOQueue(0, "float32"), "capacity must be an int >= 1, got 0"),
        (lambda: tp.queue.FIFOQueue(2, ["float32", "int32"], shapes=[(2,)]), "1 shapes given for 2 dtypes"),
        (lambda: tp.queue.FIFOQueue(2, "float32", shapes=(None,)), "None only in a PaddingFIFOQueue"),
        (lambda: tp.queue.PaddingFIFOQueue(2, "float32", shapes=None), "shapes are required"),
        (lambda: tp.queue.RandomShuffleQueue(4, 4, "float32"), r"min_after_dequeue \(4\) must be less than capacity"),
        (lambda: tp.queue.FIFOQueue(2, ["float32", "int32"], names=["a"]), "must be 2 distinct names"),
    ],
)
def test_bad_queue_arguments_are_refused(make, match):
    with pytest.raises(ValueError, match=match):
        make()


def test_names_are_unique():
    a, b = tp.queue.FIFOQueue(1, "float32", name="q"), tp.queue.FIFOQueue(1, "float32", name="q")
    assert a.name == "q" and b.name == "q_1"


def test_enqueue_blocks_at_capacity_until_a_dequeue():
    q = tp.queue.FIFOQueue(2, "int32")
    q.enqueue_many([1, 2])
    thread, box = _run(q.enqueue, 3)
    time.sleep(0.2)
    assert thread.is_alive() and q.size() == 2
    assert int(q.dequeue()) == 1
    thread.join(WAIT)
    assert not thread.is_alive() and "error" not in box
    assert q.dequeue_many(2).numpy().tolist() == [2, 3]


def test_enqueue_many_beyond_capacity_waits_for_room_and_keeps_order():
    q = tp.queue.FIFOQueue(2, "int32")
    thread, box = _run(q.enqueue_many, list(range(7)))
    got = [int(q.dequeue(timeout=WAIT)) for _ in range(7)]
    thread.join(WAIT)
    assert got == list(range(7)) and "error" not in box


def test_dequeue_blocks_until_an_enqueue():
    q = tp.queue.FIFOQueue(2, "float32")
    thread, box = _run(q.dequeue)
    time.sleep(0.2)
    assert thread.is_alive()
    q.enqueue(4.0)
    thread.join(WAIT)
    assert float(box["result"]) == 4.0


def test_timeouts_raise_deadline_exceeded_naming_the_queue():
    q = tp.queue.FIFOQueue(1, "float32", name="slow")
    with pytest.raises(DeadlineExceededError, match=r"slow: dequeue: timed out after 0.05 s"):
        q.dequeue(timeout=0.05)
    q.enqueue(1.0)
    with pytest.raises(DeadlineExceededError, match="slow: enqueue: timed out"):
        q.enqueue(2.0, timeout=0.05)
    with pytest.raises(TimeoutError):  # DeadlineExceededError is a TimeoutError
        q.dequeue_many(2, timeout=0.05)
    assert q.size() == 1  # a timed-out dequeue_many takes nothing
    with pytest.raises(ValueError, match="timeout must be a number of seconds"):
        q.dequeue(timeout=-1)


def test_close_semantics():
    q = tp.queue.FIFOQueue(5, "int32")
    q.enqueue_many([1, 2, 3])
    q.close()
    assert q.is_closed()
    with pytest.raises(CancelledError, match="the queue is closed"):
        q.enqueue(4)
    with pytest.raises(OutOfRangeError, match="holds 3 elements, 4 needed"):
        q.dequeue_many(4)
    assert q.size() == 3  # a failed dequeue_many leaves the elements
    assert q.dequeue_up_to(2).numpy().tolist() == [1, 2]
    assert q.dequeue_up_to(2).numpy().tolist() == [3]
    with pytest.raises(OutOfRangeError):
        q.dequeue_up_to(2)
    with pytest.raises(OutOfRangeError):
        q.dequeue()


def test_close_wakes_a_waiting_dequeue_with_out_of_range():
    q = tp.queue.FIFOQueue(2, "int32")
    thread, box = _run(q.dequeue)
    time.sleep(0.1)
    q.close()
    thread.join(WAIT)
    assert isinstance(box["error"], OutOfRangeError)


def test_pending_enqueues_complete_after_close_unless_cancelled():
    q = tp.queue.FIFOQueue(1, "int32")
    q.enqueue(1)
    thread, box = _run(q.enqueue, 2)
    time.sleep(0.1)
    q.close()  # the pending enqueue still waits for room
    assert int(q.dequeue()) == 1
    thread.join(WAIT)
    assert "error" not in box and int(q.dequeue()) == 2

    q = tp.queue.FIFOQueue(1, "int32")
    q.enqueue(1)
    thread, box = _run(q.enqueue, 2)
    time.sleep(0.1)
    q.close(cancel_pending_enqueues=True)
    thread.join(WAIT)
    assert isinstance(box["error"], CancelledError)
    assert int(q.dequeue()) == 1 and q.size() == 0


def test_padding_queue_pads_each_batch_to_its_longest_element():
    q = tp.queue.PaddingFIFOQueue(5, ["int32", "float32"], shapes=[(None,), (2, None)])
    q.enqueue([[1], np.ones((2, 3), np.float32)])
    q.enqueue([[1, 2, 3], np.ones((2, 1), np.float32)])
    ids, grid = q.dequeue_many(2)
    assert ids.numpy().tolist() == [[1, 0, 0], [1, 2, 3]]
    assert grid.shape == (2, 2, 3) and grid.numpy()[1, :, 1:].sum() == 0
    with pytest.raises(ValueError, match=r"must have shape \(2, None\), got \(3, 1\)"):
        q.enqueue([[1], np.ones((3, 1), np.float32)])


def test_shuffle_queue_leaves_min_after_dequeue_until_closed():
    q = tp.queue.RandomShuffleQueue(10, 3, "int32", seed=0)
    q.enqueue_many([1, 2, 3])
    with pytest.raises(DeadlineExceededError):
        q.dequeue(timeout=0.05)
    q.enqueue(4)
    first = int(q.dequeue())
    assert q.size() == 3
    q.close()
    rest = q.dequeue_up_to(10).numpy().tolist()
    assert sorted([first, *rest]) == [1, 2, 3, 4]


def test_shuffle_queue_drains_every_element_once_after_close():
    q = tp.queue.RandomShuffleQueue(20, 5, "int64", seed=3)
    q.enqueue_many(list(range(20)))
    q.close()
    got = q.dequeue_up_to(20).numpy().tolist()
    assert sorted(got) == list(range(20)) and got != list(range(20))


def test_shuffle_positions_are_uniform_chi_square():
    """Each of 8 elements lands in each of 8 dequeue positions equally often."""
    n, rounds = 8, 800
    counts = np.zeros((n, n))
    q = tp.queue.RandomShuffleQueue(n, 0, "int64", seed=11)
    for _ in range(rounds):
        q.enqueue_many(list(range(n)))
        order = q.dequeue_many(n).numpy()
        counts[order, np.arange(n)] += 1
    expected = rounds / n
    chi2 = ((counts - expected) ** 2 / expected).sum()
    dof = (n - 1) * (n - 1)
    assert stats.chi2.sf(chi2, dof) > 1e-3, chi2


def test_the_same_seed_gives_the_same_order():
    orders = []
    for _ in range(2):
        q = tp.queue.RandomShuffleQueue(10, 0, "int32", seed=5)
        q.enqueue_many(list(range(10)))
        orders.append(q.dequeue_many(10).numpy().tolist())
    assert orders[0] == orders[1]


def test_many_producers_and_consumers_lose_and_repeat_nothing():
    q = tp.queue.FIFOQueue(16, "int64")
    producers = [_run(q.enqueue_many, list(range(k * 100, (k + 1) * 100))) for k in range(3)]
    results, lock = [], threading.Lock()

    def consume():
        while True:
            try:
                batch = q.dequeue_up_to(7, timeout=WAIT).numpy().tolist()
            except OutOfRangeError:
                return
            with lock:
                results.extend(batch)

    consumers = [_run(consume) for _ in range(2)]
    for thread, box in producers:
        thread.join(WAIT)
        assert "error" not in box
    q.close()
    for thread, box in consumers:
        thread.join(WAIT)
        assert not thread.is_alive() and "error" not in box
    assert sorted(results) == list(range(300))


def test_a_producer_thread_feeds_a_training_loop():
    rng = np.random.default_rng(0)
    x = rng.normal(size=(256, 4)).astype(np.float32)
    y = (x @ np.array([1.0, -2.0, 0.5, 3.0], np.float32))[:, None]
    q = tp.queue.FIFOQueue(64, ["float32", "float32"], shapes=[(4,), (1,)])

    def produce():
        for _ in range(5):
            q.enqueue_many([x, y])
        q.close()

    producer, box = _run(produce)
    model = tp.Sequential([tp.layers.Dense(1)])
    model.compile(optimizer=tp.optimizers.SGD(0.05), loss="mse")
    losses = []
    while True:
        try:
            xb, yb = q.dequeue_up_to(32, timeout=WAIT)
        except OutOfRangeError:
            break
        losses.append(float(np.asarray(model.train_on_batch(xb, yb)).ravel()[0]))
    producer.join(WAIT)
    assert "error" not in box and len(losses) == 5 * 256 // 32
    assert losses[-1] < 0.1 * losses[0]
