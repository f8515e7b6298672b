"""The simulated step as the partitioned runtime runs it: a partition waits for all it
receives before its first node, and its values leave when its last node ends."""

from __future__ import annotations

import pytest

import tapeflow as tp
from tapeflow.graph.cost_model import CostModel, simulate, simulate_pipeline
from tapeflow.graph.partition import partition
from tapeflow.graph.placer import place
from tapeflow.profiler.recording import Event

MODEL = CostModel(flops_per_s=1e9, bytes_per_s=1e10, overhead_s=1e-5, link_latency_s=1e-3, link_bytes_per_s=1e8)


def _towers(x):
    with tp.device("/worker:1"):
        b = tp.tanh(tp.matmul(x, x))
    with tp.device("/worker:0"):
        a = tp.tanh(tp.matmul(x, x))
        return a + b


def _names(graph):
    return [[n.name for n in p.graph.nodes] for p in partition(graph).partitions]


def test_a_partition_starts_once_all_it_receives_has_arrived():
    g = tp.freeze(_towers, tp.TensorSpec((64, 64)), optimize=False)
    mm_b, tanh_b, mm_a, tanh_a, add = g.nodes
    assert [n.op for n in g.nodes] == ["matmul", "tanh", "matmul", "tanh", "add"]
    t = MODEL.node_seconds
    sent = MODEL.transfer_seconds(64 * 64 * 4, "/worker:1/cpu:0", "/worker:0/cpu:0")
    arrived = t(mm_b) + t(tanh_b) + sent
    # node by node, worker 0 computes its tower while worker 1's result travels
    dataflow = simulate(g, MODEL)
    assert dataflow.step_seconds == pytest.approx(max(t(mm_a) + t(tanh_a), arrived) + t(add))
    # partitioned, worker 0's partition (its tower and the add) waits for the value first
    cut = simulate(g, MODEL, _names(g))
    assert cut.step_seconds == pytest.approx(arrived + t(mm_a) + t(tanh_a) + t(add))
    assert cut.start[mm_a.name] == pytest.approx(arrived)
    assert (cut.transfers, cut.transfer_bytes) == (dataflow.transfers, dataflow.transfer_bytes) == (1, 64 * 64 * 4)


def test_values_leave_a_partition_when_it_ends():
    def f(x):
        with tp.device("/worker:0"):
            h = tp.exp(x)
            k = tp.matmul(x, x)
        with tp.device("/worker:1"):
            return h * 2.0, k

    g = tp.freeze(f, tp.TensorSpec((64, 64)), optimize=False)
    exp, matmul, multiply = g.nodes
    cut = simulate(g, MODEL, _names(g))
    sent = MODEL.transfer_seconds(64 * 64 * 4, "/worker:0/cpu:0", "/worker:1/cpu:0")
    ended = MODEL.node_seconds(exp) + MODEL.node_seconds(matmul)
    assert cut.start[multiply.name] == pytest.approx(ended + sent)  # exp's value waited for the matmul
    assert simulate(g, MODEL).start[multiply.name] == pytest.approx(MODEL.node_seconds(exp) + sent)


def test_one_device_plays_the_same_either_way():
    g = tp.freeze(lambda x: tp.tanh(tp.matmul(x, x)) + 1.0, tp.TensorSpec((32, 32)), optimize=False)
    place(g, ["/worker:0/cpu:0"])
    assert simulate(g, MODEL, _names(g)).step_seconds == pytest.approx(simulate(g, MODEL).step_seconds)


def _there_and_back(x):
    with tp.device("/worker:0"):
        h = tp.matmul(x, x)
    with tp.device("/worker:1"):
        k = tp.matmul(h, h)
    with tp.device("/worker:0"):
        return tp.matmul(k, x)


PIPE = CostModel(flops_per_s=1e9, bytes_per_s=1e12, overhead_s=0.0, link_latency_s=1e-4, link_bytes_per_s=1e8)


def test_one_micro_batch_plays_as_the_partitioned_step():
    g = tp.freeze(_there_and_back, tp.TensorSpec((64, 64)), optimize=False)
    one = simulate_pipeline(g, MODEL, _names(g), 1)
    assert one.step_seconds == pytest.approx(simulate(g, MODEL, _names(g)).step_seconds)
    assert (one.transfers, one.transfer_bytes) == (2, 2 * 64 * 64 * 4)


def test_each_partition_runs_every_micro_batch_before_the_next_partition():
    g = tp.freeze(_there_and_back, tp.TensorSpec((100, 100)), optimize=False)
    first, second, third = g.nodes
    t = PIPE.node_seconds(first)  # all three matmuls alike
    sent = PIPE.transfer_seconds(100 * 100 * 4, "/worker:0/cpu:0", "/worker:1/cpu:0")
    step = simulate_pipeline(g, PIPE, _names(g), 3)
    # worker 0 runs the first matmul of micro-batches 0, 1, 2, then the last one of each
    assert [step.start[(first.name, mb)] for mb in range(3)] == pytest.approx([0.0, t, 2 * t])
    assert [step.start[(second.name, mb)] for mb in range(3)] == pytest.approx([t + sent, 2 * t + sent, 3 * t + sent])
    # the last matmul of micro-batch 0 waits for worker 0 to finish its first partition's micro-batches
    assert step.start[(third.name, 0)] == pytest.approx(3 * t)
    # worker 1's values come back (at 5t + 2 sent for micro-batch 2) while worker 0 is still busy
    assert [step.start[(third.name, mb)] for mb in range(3)] == pytest.approx([3 * t, 4 * t, 5 * t])
    assert step.step_seconds == pytest.approx(6 * t)
    assert step.transfers == 6
    assert step.busy["/worker:1/cpu:0"] == pytest.approx(3 * t)


def test_after_adds_a_device_update_and_bad_arguments_are_refused():
    g = tp.freeze(_there_and_back, tp.TensorSpec((100, 100)), optimize=False)
    base = simulate_pipeline(g, PIPE, _names(g), 2)
    later = simulate_pipeline(g, PIPE, _names(g), 2, after={"/worker:0/cpu:0": 0.5})
    assert later.step_seconds == pytest.approx(base.step_seconds + 0.5)
    with pytest.raises(ValueError, match="micro_batches"):
        simulate_pipeline(g, PIPE, _names(g), 0)
    with pytest.raises(ValueError, match="no partition runs"):
        simulate_pipeline(g, PIPE, _names(g), 2, after={"/worker:3/cpu:0": 0.1})
    with pytest.raises(ValueError, match="wait for each other"):
        simulate_pipeline(g, PIPE, list(reversed(_names(g))), 2)


def test_a_partition_sends_its_values_one_after_the_other():
    def f(x):
        with tp.device("/worker:0"):
            a, b = tp.exp(x), tp.tanh(x)
        with tp.device("/worker:1"):
            return a * 2.0, b * 3.0

    g = tp.freeze(f, tp.TensorSpec((1000,)), optimize=False)
    exp, tanh, times_two, times_three = g.nodes
    costly = CostModel(**{**MODEL.to_dict(), "send_overhead_s": 0.01})
    cut, free = simulate(g, costly, _names(g)), simulate(g, MODEL, _names(g))
    ended, wire = MODEL.node_seconds(exp) + MODEL.node_seconds(tanh), 4000 / MODEL.link_bytes_per_s
    link = wire + MODEL.link_latency_s
    # worker 1's partition waits for the second value, which left after both sends (the link was free again)
    assert cut.start[times_two.name] == pytest.approx(ended + 0.02 + link)
    # without the senders' time, the second value queued behind the first one on the link
    assert cut.step_seconds == pytest.approx(free.step_seconds + 0.02 - link)
    assert cut.busy["/worker:0/cpu:0"] == pytest.approx(ended + 0.02)
    # the node-by-node play (the placer's) leaves it out
    assert simulate(g, costly).step_seconds == pytest.approx(simulate(g, MODEL).step_seconds)


def test_refine_takes_the_senders_time_from_the_profile():
    g = tp.freeze(lambda x: tp.exp(x), tp.TensorSpec((4,)), optimize=False)
    profile = tp.profiler.Profile()
    profile.events += [Event("send", "comm", "send", 0, d, 0) for d in (1_000_000, 3_000_000)]
    assert MODEL.refine(profile, g).send_overhead_s == pytest.approx(0.002)
    assert MODEL.refine(profile, g, statistic="min").send_overhead_s == pytest.approx(0.001)
    assert MODEL.refine(tp.profiler.Profile(), g).send_overhead_s == MODEL.send_overhead_s


def test_link_busy_says_how_much_of_the_latency_the_next_value_waits_for():
    def f(x):
        with tp.device("/worker:0"):
            a, b = tp.exp(x), tp.tanh(x)
        with tp.device("/worker:1"):
            return a * b

    g = tp.freeze(f, tp.TensorSpec((1000,)), optimize=False)
    exp, tanh, multiply = g.nodes
    ended, wire, latency = MODEL.node_seconds(exp) + MODEL.node_seconds(tanh), 4000 / MODEL.link_bytes_per_s, 1e-3
    for busy, second in ((None, 2 * (wire + latency)), (0.0, 2 * wire + latency), (2e-4, 2 * wire + 2e-4 + latency)):
        model = CostModel(**{**MODEL.to_dict(), "link_busy_s": busy})
        assert simulate(g, model, _names(g)).start[multiply.name] == pytest.approx(ended + second)
    with pytest.raises(ValueError, match="link_busy_s"):
        CostModel(link_busy_s=-1.0)
