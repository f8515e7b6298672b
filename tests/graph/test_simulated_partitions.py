"""The simulated step as the partitioned runtime runs it: a partition waits for all it
receives before its first node, and its values leave when its last node ends."""

from __future__ import annotations

import pytest

import tapeflow as tp
from tapeflow.graph.cost_model import CostModel, simulate
from tapeflow.graph.partition import partition
from tapeflow.graph.placer import place

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
