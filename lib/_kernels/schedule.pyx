"""A graph executor's run loop, compiled: the slot list filled, each kernel step called and
the fetches collected with no Python frame per step.

`tapeflow.graph.executor.Executor` compiles a graph into steps, tuples `(kind, fn, args,
out, dtype, node, conform, frees)` over a list of slots. A `Schedule` holds one such
schedule with its slots: `run(feed_arrays)` puts the fed arrays, constants and variables'
arrays in their slots and runs the steps inside `enter()` / `leave(state)`. A kernel step
(`kernel_kind`) calls `fn(*args(slots))` and makes its result the step's `dtype` with
`conform`; a chain step (`chain_kind`) calls its one-call kernel, or `run_layers` where that
kernel does not take the arrays; any other step goes to `run_step(slots, step)`. A failing
kernel is raised as `failed(slots, step, error)`. After each step its `frees` slots are cleared.

>>> import numpy as np
>>> square = (1, np.square, lambda env: (env[0],), 1, np.dtype("float32"), None, None, ())
>>> schedule = Schedule(2, (0,), (), (), (square,), (1,), enter=lambda: None,
...                     leave=lambda state: None, run_step=None, run_layers=None, failed=None,
...                     kernel_kind=1, chain_kind=4)
>>> schedule.run([np.array([3.0], np.float32)])[0].tolist()
[9.0]
"""

include "_common.pxi"

import numpy as np


cdef class Schedule:
    """A compiled schedule of steps over `size` slots (see the module's doc)."""

    cdef Py_ssize_t size
    cdef tuple feed_slots, constants, reads, steps, fetch_slots
    cdef object enter, leave, run_step, run_layers, failed
    cdef int kernel_kind, chain_kind
    cdef object ndarray

    def __init__(self, Py_ssize_t size, feed_slots, constants, reads, steps, fetch_slots, *, enter, leave,
                 run_step, run_layers, failed, kernel_kind, chain_kind):
        self.size = size
        self.feed_slots = tuple(feed_slots)
        self.constants = tuple(constants)
        self.reads = tuple(reads)
        self.steps = tuple(steps)
        self.fetch_slots = tuple(fetch_slots)
        for slot in (*self.feed_slots, *self.fetch_slots, *(s for s, _ in self.constants), *(s for s, _ in self.reads)):
            if not 0 <= slot < size:
                raise ValueError(f"Schedule: slot {slot} is outside the {size} slots")
        self.enter, self.leave = enter, leave
        self.run_step, self.run_layers, self.failed = run_step, run_layers, failed
        self.kernel_kind, self.chain_kind = kernel_kind, chain_kind
        self.ndarray = np.ndarray

    def run(self, feed_arrays):
        """The fetched arrays (a list) of one run on one array per feed."""
        cdef Py_ssize_t i, feeds = len(self.feed_slots)
        if len(feed_arrays) != feeds:
            raise ValueError(f"Schedule.run: expected {feeds} fed arrays, got {len(feed_arrays)}")
        cdef list env = [None] * self.size
        for i in range(feeds):
            env[<Py_ssize_t>self.feed_slots[i]] = feed_arrays[i]
        for slot, data in self.constants:
            env[<Py_ssize_t>slot] = data
        for slot, variable in self.reads:
            env[<Py_ssize_t>slot] = variable._value
        state = self.enter()
        try:
            self._run_steps(env)
        finally:
            self.leave(state)
        return [env[<Py_ssize_t>slot] for slot in self.fetch_slots]

    cdef _run_steps(self, list env):
        cdef tuple step
        cdef int kind
        for step in self.steps:
            kind = step[0]
            if kind == self.kernel_kind:
                try:
                    r = step[1](*step[2](env))
                except Exception as exc:
                    raise self.failed(env, step, exc) from exc
                dtype = step[4]
                if type(r) is not self.ndarray or (r.dtype is not dtype and r.dtype != dtype):
                    r = step[6](r, dtype)
                env[<Py_ssize_t>step[3]] = r
            elif kind == self.chain_kind:
                r = step[1][0](*step[2](env))
                env[<Py_ssize_t>step[3]] = r if r is not None else self.run_layers(env, step[1][1])
            else:
                self.run_step(env, step)
            for slot in step[7]:
                env[<Py_ssize_t>slot] = None
