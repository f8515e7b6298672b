"""An executor's schedule as one straight-line Python function.

The run loop of `Executor` looks up each step's kind, input slots and output slot in a
list of slots; for a graph of small arrays that bookkeeping costs as much as the kernels.
`compile_schedule` writes the same schedule out as a function of local variables, one
statement per kernel call, each value deleted after its last reader, so that a run does
only what the schedule itself asks for. The source holds nothing but generated names and
integers (kernels, dtypes, variables and nodes are passed in by name), so no text of a
graph, or of a file it came from, is ever run.

What it keeps from the loop: a failing kernel's error names the node and its input
shapes (the same `NodeError`); the checks a device deferred are made before any variable
changes and at the end; the numerics of the run's devices are set around it.

>>> import contextlib
>>> import numpy as np
>>> f64 = np.dtype(np.float64)
>>> steps = [(KERNEL, np.exp, (0,), 1, f64, None, None, (0,)), (KERNEL, np.negative, (1,), 2, f64, None, None, ())]
>>> options = {"devices": (), "reusing": contextlib.nullcontext, "from_host": None, "device_index": 0,
...            "node_error": None}
>>> run = compile_schedule(steps, [0], [], [], [1, 2], options)
>>> [a.tolist() for a in run([np.zeros(2)])]
[[1.0, 1.0], [-1.0, -1.0]]
"""

from __future__ import annotations

import numpy as np

from tapeflow.backends import numerics
from tapeflow.backends.common import PENDING, check_pending

# step kinds, as the executor numbers them
ASSIGN, KERNEL, MULTI = 0, 1, 2


def compile_schedule(steps, feed_slots, constants, reads, fetch_slots, options):
    """A function `run(feed_arrays) -> fetched arrays` doing `steps` in order.

    `steps` are (kind, fn, input slots, output slot(s), dtype(s), node, conform, freed slots);
    for an assignment `fn` is the Variable and the first input slot its new value.
    `constants` are (slot, array) pairs and `reads` (slot, Variable) pairs, each variable's
    value read as the run starts; `options` holds `devices` (whose numerics the run sets),
    `reusing` (a context manager factory around the run), `from_host` (None where the
    backend holds NumPy arrays, else the copy of a fed array onto `device_index`) and
    `node_error` (the error of a node given its input arrays and the exception).
    """
    names: dict = {
        "ndarray": np.ndarray,
        "PENDING": PENDING,
        "check_pending": check_pending,
        "enter": numerics.enter,
        "leave": numerics.leave,
        "devices": options["devices"],
        "reusing": options["reusing"],
        "from_host": options["from_host"],
        "device_index": options["device_index"],
        "node_error": options["node_error"],
        "steps": steps,
    }
    lines = ["def run(feed_arrays):"]
    body = []
    if feed_slots:
        body.append(f"({', '.join(f'v{s}' for s in feed_slots)},) = feed_arrays")
        if options["from_host"] is not None:
            body.extend(f"v{s} = from_host(v{s}, device_index)" for s in feed_slots)
    for slot, array in constants:
        names[f"k{slot}"] = array
        body.append(f"v{slot} = k{slot}")
    for slot, variable in reads:
        names[f"s{slot}"] = variable
        body.append(f"v{slot} = s{slot}._value")
    body += ["entered = []", "i = -1", "try:", "    for device in devices:", "        entered.append(enter(device))"]
    inner = ["with reusing():"]
    run_lines = []
    for i, (kind, fn, ins, out, dtype, _node, conform, frees) in enumerate(steps):
        args = ", ".join(f"v{s}" for s in ins)
        names[f"f{i}"], names[f"c{i}"] = fn, conform
        if kind == KERNEL:
            names[f"d{i}"] = dtype
            run_lines += [
                f"i = {i}",
                f"r = f{i}({args})",
                "i = -1",
                f"if type(r) is not ndarray or (r.dtype is not d{i} and r.dtype != d{i}):",
                f"    r = c{i}(r, d{i})",
                f"v{out} = r",
            ]
        elif kind == MULTI:
            run_lines += [f"i = {i}", f"r = f{i}({args})", "i = -1"]
            for k, (slot, one_dtype) in enumerate(zip(out, dtype, strict=True)):
                names[f"d{i}_{k}"] = one_dtype
                run_lines += [
                    f"v{slot} = r[{k}]",
                    f"if type(v{slot}) is not ndarray or v{slot}.dtype != d{i}_{k}:",
                    f"    v{slot} = c{i}(v{slot}, d{i}_{k})",
                ]
        elif kind == ASSIGN:
            names[f"d{i}"] = fn.dtype.np
            run_lines += [
                "if PENDING.flags:  # checks deferred on a device pass before any variable changes",
                "    check_pending(deferrable=True)",
                f"r = v{ins[0]}",
                f"f{i}._value = r if type(r) is ndarray and r.dtype is d{i} else c{i}(r, d{i})",
            ]
        else:
            raise ValueError(f"compile_schedule: step {i} has a kind ({kind}) a straight-line run cannot take")
        if frees:
            run_lines.append(f"del {', '.join(f'v{s}' for s in frees)}")
    run_lines.append("pass")
    inner += ["    " + line for line in run_lines]
    body += ["    " + line for line in inner]
    body += [
        "except Exception as exc:",
        "    if i < 0:",
        "        raise",
        "    values = locals()",
        "    raise node_error(steps[i][5], [values.get('v%d' % s) for s in steps[i][2]], exc) from exc",
        "finally:",
        "    while entered:",
        "        leave(entered.pop())",
        "if PENDING.flags:  # checks deferred on a device: one read per run",
        "    check_pending(deferrable=True)",
        f"return [{', '.join(f'v{s}' for s in fetch_slots)}]",
    ]
    lines += ["    " + line for line in body]
    code = compile("\n".join(lines) + "\n", "<tapeflow straight-line schedule>", "exec")
    exec(code, names)  # noqa: S102 - generated above from integers and fixed text only
    return names["run"]
