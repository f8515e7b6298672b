"""The points where a profiler observes execution: `HOOKS.op` is called after every eager
op, `HOOKS.node` after every graph node the executor runs and `HOOKS.span` at the end of
a named span of the distributed runtime (a parameter push or pull, a send or a receive,
a replica's step). All are None unless a profile is being recorded (`tapeflow.profiler`),
and execution checks nothing else, so profiling that is off costs one attribute read per
op or span.

>>> HOOKS.op is None and HOOKS.node is None and HOOKS.span is None
True
"""

from __future__ import annotations


class _Hooks:
    __slots__ = ("op", "node", "span")

    def __init__(self):
        self.op = None  # op_name, inputs, outputs, device, start_ns -> None
        self.node = None  # graph, node, input arrays, result, start_ns -> None
        self.span = None  # name, kind, start_ns, payload, args -> None


HOOKS = _Hooks()
