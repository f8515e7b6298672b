"""The points where a profiler observes execution: `HOOKS.op` is called after every eager
op and `HOOKS.node` after every graph node the executor runs. Both are None unless a
profile is being recorded (`tapeflow.profiler`), and execution checks nothing else, so
profiling that is off costs one attribute read per op.

>>> HOOKS.op is None and HOOKS.node is None
True
"""

from __future__ import annotations


class _Hooks:
    __slots__ = ("op", "node")

    def __init__(self):
        self.op = None  # op_name, inputs, outputs, device, start_ns -> None
        self.node = None  # graph, node, input arrays, result, start_ns -> None


HOOKS = _Hooks()
