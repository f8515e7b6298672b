"""Queues inside frozen graphs: queue ops are recorded as stateful nodes that passes keep in
order, a traced graph uses the live queue, and a loaded graph the queue bound to its name."""

from __future__ import annotations

import io
import threading

import numpy as np
import pytest

import tapeflow as tp
from tapeflow.graph import passes
from tapeflow.graph.ir import GraphError
from tapeflow.queue import DeadlineExceededError, OutOfRangeError

WAIT = 10.0  # seconds any wait in these tests may take before the test fails

QUEUE_OPS = ("queue_enqueue", "queue_enqueue_many", "queue_dequeue", "queue_dequeue_many", "queue_dequeue_up_to")


def _queue_ops(graph) -> list[str]:
    return [n.op for n in graph.nodes if n.op.startswith("queue_")]


def test_a_frozen_step_dequeues_a_batch_and_trains():
    rng = np.random.default_rng(0)
    x = rng.standard_normal((12, 3))
    y = x @ np.array([[1.0], [-2.0], [0.5]])
    q = tp.queue.FIFOQueue(12, ["float64", "float64"], shapes=[(3,), (1,)])
    q.enqueue_many([x, y])
    w = tp.Variable(np.zeros((3, 1)), name="w")

    @tp.function
    def train_step():
        xb, yb = q.dequeue_many(4, timeout=WAIT)
        with tp.GradientTape() as tape:
            loss = tp.mean((xb @ w - yb) ** 2)
        (grad,) = tape.gradient(loss, [w])
        w.assign_sub(0.1 * grad)
        return loss

    expected_w, losses = np.zeros((3, 1)), []
    for k in range(3):
        xb, yb = x[4 * k : 4 * k + 4], y[4 * k : 4 * k + 4]
        r = xb @ expected_w - yb
        losses.append(np.mean(r**2))
        expected_w = expected_w - 0.1 * (2 * xb.T @ r / r.size)
    got = [float(train_step()) for _ in range(3)]
    np.testing.assert_allclose(got, losses, rtol=1e-12)
    np.testing.assert_allclose(w.numpy(), expected_w, rtol=1e-12)
    assert train_step.trace_count == 1 and q.size() == 0
    with pytest.raises(DeadlineExceededError, match="timed out"):
        tp.freeze(lambda: q.dequeue_many(4, timeout=0.05))()


def test_enqueue_inside_a_graph_runs_each_call():
    q = tp.queue.FIFOQueue(8, ["float32", "int64"], shapes=[(2,), ()], name="pairs")
    g = tp.freeze(lambda x: q.enqueue([x * 2.0, tp.cast(tp.sum(x), "int64")]), tp.TensorSpec((2,)))
    assert "queue_enqueue[queue='pairs', timeout=None](%multiply_0, %cast_0)" in str(g)
    g(np.array([1.0, 2.0], np.float32))
    g(np.array([3.0, 4.0], np.float32))
    batch = tp.freeze(lambda rows: q.enqueue_many(rows), [tp.TensorSpec((None, 2)), tp.TensorSpec((None,), "int64")])
    batch([np.zeros((2, 2), np.float32), np.array([5, 6])])
    xs, ys = q.dequeue_many(4)
    assert xs.numpy().tolist() == [[2.0, 4.0], [6.0, 8.0], [0.0, 0.0], [0.0, 0.0]]
    assert ys.numpy().tolist() == [3, 7, 5, 6]


def test_passes_keep_queue_nodes_and_their_order():
    q = tp.queue.FIFOQueue(8, "float32", shapes=[()], name="order")

    def fn():
        q.enqueue(tp.constant(1.0) + 1.0)  # a constant input: folding must not run the enqueue
        first = q.dequeue()  # unused: dead code by data flow, but it takes an element
        q.enqueue_many(tp.constant([3.0, 4.0]))
        size = q.size()
        q.dequeue_up_to(1)
        q.close()
        del first
        return size

    g = tp.freeze(fn, optimize=False)
    before = _queue_ops(g)
    assert before == [
        "queue_enqueue",
        "queue_dequeue",
        "queue_enqueue_many",
        "queue_size",
        "queue_dequeue_up_to",
        "queue_close",
    ]
    passes.optimize(g)
    assert _queue_ops(g) == before
    assert int(g()) == 2  # after enqueue, dequeue, enqueue_many: two elements
    assert q.is_closed() and q.size() == 1


def test_dead_code_elimination_keeps_enqueue():
    q = tp.queue.FIFOQueue(2, "float32", shapes=[(3,)])
    g = tp.freeze(lambda x: (q.enqueue(tp.exp(x)), x * 2.0)[1], tp.TensorSpec((3,)), optimize=False)
    assert passes.DeadCodeElimination().run(g) is False
    assert g.op_counts() == {"exp": 1, "multiply": 1, "queue_enqueue": 1}
    g(np.zeros(3, np.float32))
    assert q.dequeue(timeout=WAIT).numpy().tolist() == [1.0, 1.0, 1.0]


def test_out_of_range_keeps_its_type_in_a_graph():
    q = tp.queue.FIFOQueue(4, "int64", shapes=[()])
    step = tp.freeze(lambda: q.dequeue_up_to(3))
    q.enqueue_many([1, 2])
    q.close()
    assert step().numpy().tolist() == [1, 2]
    with pytest.raises(OutOfRangeError, match=r"node 'queue_dequeue_up_to_0' \(queue_dequeue_up_to\).*closed"):
        step()


def test_dequeue_in_a_graph_needs_shapes():
    q = tp.queue.FIFOQueue(2, "float32", name="shapeless")
    with pytest.raises(ValueError, match="shapeless: dequeue inside a traced function needs the queue's shapes"):
        tp.freeze(lambda: q.dequeue())


def test_traced_enqueue_checks_dtypes_and_shapes():
    q = tp.queue.FIFOQueue(2, "float32", shapes=[(3,)], name="checked")
    with pytest.raises(TypeError, match="checked: enqueue: component 0 must be float32, got float64"):
        tp.freeze(lambda x: q.enqueue(x), tp.TensorSpec((3,), "float64"))
    with pytest.raises(ValueError, match=r"checked: enqueue: component 0 must have shape \(3,\), got \(4,\)"):
        tp.freeze(lambda x: q.enqueue(x), tp.TensorSpec((4,)))


def test_save_and_load_bind_the_queue_the_caller_gives():
    q = tp.queue.FIFOQueue(4, "float32", shapes=[(2,)], name="feed")
    g = tp.freeze(lambda: q.dequeue() + 1.0)
    buffer = io.BytesIO()
    g.save(buffer)
    other = tp.queue.FIFOQueue(4, "float32", shapes=[(2,)], name="elsewhere")
    loaded = tp.load_graph(io.BytesIO(buffer.getvalue()), queues={"feed": other})
    other.enqueue([1.0, 2.0])
    assert loaded().numpy().tolist() == [2.0, 3.0]
    assert q.size() == 0 and other.size() == 0


def test_a_missing_binding_is_an_error_naming_the_queue():
    q = tp.queue.FIFOQueue(4, "float32", shapes=[(2,)], name="named_feed")
    buffer = io.BytesIO()
    tp.freeze(lambda x: q.enqueue(x), tp.TensorSpec((2,))).save(buffer)
    data = buffer.getvalue()
    with pytest.raises(GraphError, match=r"uses queues \['named_feed'\], which `queues` does not bind"):
        tp.load_graph(io.BytesIO(data), queues={})
    with pytest.raises(GraphError, match=r"binds \['spare'\], which graph 'lambda' does not use"):
        tp.load_graph(io.BytesIO(data), queues={"named_feed": q, "spare": q})
    unbound = tp.load_graph(io.BytesIO(data))
    with pytest.raises(GraphError, match=r"uses queue 'named_feed', which is bound to no queue"):
        unbound(np.zeros(2, np.float32))
    assert q.size() == 0


def test_a_loaded_dequeue_checks_the_bound_queue_dtypes():
    q = tp.queue.FIFOQueue(4, "float32", shapes=[(2,)], name="typed_feed")
    buffer = io.BytesIO()
    tp.freeze(lambda: q.dequeue()).save(buffer)
    wrong = tp.queue.FIFOQueue(4, "int32", shapes=[(2,)])
    with pytest.raises(GraphError, match=r"dequeues \['float32'\] from queue 'typed_feed'.*holds \['int32'\]"):
        tp.load_graph(io.BytesIO(buffer.getvalue()), queues={"typed_feed": wrong})


def test_a_graph_consumer_and_an_eager_producer_in_threads():
    q = tp.queue.FIFOQueue(3, "float32", shapes=[(2,)])
    total = tp.Variable(np.zeros(2, np.float32), name="total")

    @tp.function
    def consume():
        total.assign_add(tp.sum(q.dequeue_many(2, timeout=WAIT), axis=0))

    def produce():
        for k in range(6):
            q.enqueue([float(k), 1.0], timeout=WAIT)

    thread = threading.Thread(target=produce, daemon=True)
    thread.start()
    for _ in range(3):
        consume()
    thread.join(WAIT)
    assert total.numpy().tolist() == [15.0, 6.0]
