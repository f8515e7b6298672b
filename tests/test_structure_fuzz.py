"""Structure-aware fuzzing of every file kind tapeflow loads: graphs (.tfg), model files,
weights files (keyed by structure and by name) and checkpoints.

Each mutant is a *valid container*: the original file is parsed (attributes, JSON
documents, arrays), one part of its structure is changed (a config value made huge,
negative, NaN or of the wrong type; a key dropped, renamed or duplicated; a class name
swapped; a graph node's attribute, input, output shape or dtype edited; a weight's shape,
dtype or key changed; a metadata attribute edited), and the file is written again with
fresh checksums and manifest, so only the loaders' checks stand between it and the model.

A worker process (tests/structure_fuzz_worker.py) loads each mutant under a memory limit
(RLIMIT_AS) and a time limit, then runs what loaded. Outcomes:

- "refused": a ValueError or TypeError naming the file;
- "same": loaded and ran exactly as the original does;
- "changed": loaded and ran differently, after an edit a valid file may hold (another
  activation, one more epoch, a rewired graph input of the same type);
- "run_error": loaded, then failed to run with a ValueError or TypeError (a graph whose
  dimensions are known only when it runs, rewired so that they no longer fit);
- bad: "misload" (loaded and ran differently after an edit a loader can detect: a wrong
  type, a renamed or duplicated key, a weight of another shape, an output of another type),
  "raw" (any other exception, or an error not naming the file), "oom" (MemoryError under
  the limit), "hang", "run_hang" (the run outlived the time limit) and "crash".

The full campaign runs by hand::

    python tests/test_structure_fuzz.py --count 2000 [--workers 2] [--keep DIR]
"""

from __future__ import annotations

import argparse
import collections
import copy
import json
import math
import os
import queue
import random
import subprocess
import sys
import tempfile
import threading
import time

import h5py
import numpy as np
import pytest

from tapeflow.files.safe_h5 import CRC_ATTR, MANIFEST, write_array, write_attrs, write_manifest, write_text

WORKER = os.path.join(os.path.dirname(os.path.abspath(__file__)), "structure_fuzz_worker.py")
KINDS = ("graph", "model", "weights", "checkpoint")
BAD = ("misload", "raw", "oom", "hang", "run_hang", "crash")
# a graph whose dimensions are known only when it runs may fail then, with a clear error
NOTED = ("run_error",)
LOAD_TIMEOUT_S = 20.0
STARTUP_TIMEOUT_S = 300.0
MEMORY_LIMIT = 1 << 30
SLOW_TEST_COUNT = 300  # mutants per kind in the test suite: about a minute on two quiet cores


# ------------------------------------------------------------------ containers
class Container:
    """An HDF5 file as tapeflow writes it: attributes, and entries in file order, each a
    group, a numeric array or a text; `docs` holds the JSON documents parsed (the texts,
    and the graph description)."""

    def __init__(self, path: str):
        self.entries: list[dict] = []
        self.docs: dict[str, object] = {}
        with h5py.File(path, "r") as f:
            self.attrs = _plain_attrs(f)

            def visit(name, item):
                entry = {"path": name, "attrs": _plain_attrs(item)}
                if isinstance(item, h5py.Group):
                    entry["kind"] = "group"
                elif item.dtype.kind == "S":
                    entry["kind"], entry["value"] = "text", bytes(item[()]).decode()
                else:
                    entry["kind"], entry["value"] = "array", np.asarray(item[()])
                self.entries.append(entry)

            f.visititems(visit)
        for entry in self.entries:
            if entry["kind"] == "text" and entry["path"] != MANIFEST:
                self.docs[entry["path"]] = json.loads(entry["value"])
            elif entry["path"] == "graph_json":
                self.docs["graph_json"] = json.loads(entry["value"].tobytes().decode())
        self.texts: dict[str, str] = {}  # JSON written as given (duplicate keys, NaN)

    def arrays(self) -> list[dict]:
        return [e for e in self.entries if e["kind"] == "array" and e["path"] != "graph_json"]

    def write(self, path: str) -> None:
        with h5py.File(path, "w") as f:
            _set_attrs(f, self.attrs)
            for entry in self.entries:
                name = entry["path"]
                if name == MANIFEST:
                    continue
                parent, _, leaf = name.rpartition("/")
                group = f.require_group(parent) if parent else f
                if entry["kind"] == "group":
                    _set_attrs(f.require_group(name), entry["attrs"])
                    continue
                if name in self.docs:
                    text = self.texts.get(name) or json.dumps(self.docs[name], separators=(",", ":"))
                    text = text.replace(json.dumps(_DEEP), "[" * 3000 + "]" * 3000)
                    if entry["kind"] == "text":
                        write_text(group, leaf, text)
                    else:
                        write_array(group, leaf, np.frombuffer(text.encode(), np.uint8))
                elif entry["kind"] == "text":
                    write_text(group, leaf, entry["value"])
                else:
                    write_array(group, leaf, entry["value"])
            write_manifest(f)


def _plain_attrs(obj) -> dict:
    out = {}
    for key, value in obj.attrs.items():
        if key == CRC_ATTR:
            continue
        out[key] = value.decode() if isinstance(value, bytes | np.bytes_) else value.item()
    return out


def _set_attrs(obj, values: dict) -> None:
    if all(isinstance(v, str) or (isinstance(v, int) and not isinstance(v, bool)) for v in values.values()):
        write_attrs(obj, values)
        return
    for key, value in values.items():  # a value of a type tapeflow never writes: no checksum either
        obj.attrs[key] = np.bytes_(value.encode()) if isinstance(value, str) else value


# ------------------------------------------------------------------ JSON mutations
_REPLACEMENTS = {
    "huge": lambda r: r.choice([2**31, 2**40, 2**62, 10**30]),
    "negative": lambda r: r.choice([-1, -3, -(2**40)]),
    "zero": lambda r: 0,
    "nan": lambda r: r.choice([math.nan, math.inf, -math.inf]),
    "fraction": lambda r: r.choice([0.5, 2.5, 1e-300]),
    "string": lambda r: r.choice(["", "x", "relu", "float64", "same", "../../etc/passwd", "Dense"]),
    "null": lambda r: None,
    "bool": lambda r: r.choice([True, False]),
    "list": lambda r: r.choice([[], [1], [None, 2, 3], [[1, 2], [3]], ["a"]]),
    "dict": lambda r: r.choice([{}, {"class_name": "Dense", "config": {}}, {"a": 1}]),
    "deep": lambda r: _DEEP,
}
_DEEP = "__DEEP__"  # written as lists nested 3000 deep


def _json_type(value) -> str:
    if isinstance(value, bool) or value is None:
        return type(value).__name__
    if isinstance(value, int):
        return "int"
    return type(value).__name__


def _paths(doc, prefix=()) -> list[tuple]:
    """The path (keys and indices) of every value inside `doc`."""
    out, stack = [], [(prefix, doc)]
    while stack:
        path, value = stack.pop()
        if path:
            out.append(path)
        if isinstance(value, dict):
            stack.extend((path + (k,), v) for k, v in value.items())
        elif isinstance(value, list):
            stack.extend((path + (i,), v) for i, v in enumerate(value))
    return sorted(out, key=repr)


def _get(doc, path):
    for key in path:
        doc = doc[key]
    return doc


def _strings(doc) -> list[str]:
    return sorted({v for p in _paths(doc) if isinstance(v := _get(doc, p), str)})


def mutate_json(doc, rng: random.Random, strict_types: bool = True):
    """Change one value (or key) of a JSON document in place; returns (description,
    whether a loader must refuse the result when it changes what loads, JSON text to
    write instead of the document, or None)."""
    paths = _paths(doc)
    if not paths:
        return "empty", False, None
    path = rng.choice(paths)
    parent, key = _get(doc, path[:-1]), path[-1]
    value = parent[key]
    where = "/".join(map(str, path))[-120:]
    op = rng.choice(["replace"] * 5 + ["tweak"] * 4 + ["key"] * 2 if isinstance(parent, dict) else ["replace", "tweak"])
    if op == "key":
        how = rng.choice(["drop", "rename", "duplicate"])
        if how == "drop":
            del parent[key]
            return f"drop key {where}", False, None
        if how == "rename":
            parent[key + "_x"] = parent.pop(key)
            return f"rename key {where}", True, None
        marker = "__DUPLICATE__"
        other = _REPLACEMENTS[rng.choice(sorted(_REPLACEMENTS))](rng)
        parent[marker] = other
        text = json.dumps(doc, separators=(",", ":")).replace(
            json.dumps(marker), json.dumps(key) if isinstance(key, str) else json.dumps(str(key))
        )
        return f"duplicate key {where}", True, text
    if op == "replace":
        name = rng.choice(sorted(_REPLACEMENTS))
        new = _REPLACEMENTS[name](rng)
        parent[key] = new
        widened = _json_type(new) == "int" and _json_type(value) == "float"  # an int is a valid float
        # a huge or negative count, size or index is wrong; a huge or negative float may be a valid value
        extreme = name in ("nan", "deep") or (name in ("huge", "negative") and _json_type(value) == "int")
        typed = (_json_type(new) != _json_type(value) and not widened) or extreme
        return f"replace {where}: {value!r:.40} -> {name} {new!r:.40}", typed and strict_types, None
    if isinstance(value, bool):
        parent[key] = not value
    elif isinstance(value, int):
        parent[key] = value + rng.choice([1, -1, value or 1])
    elif isinstance(value, float):
        parent[key] = value * rng.choice([2.0, 0.5, -1.0]) if value else 0.25
    elif isinstance(value, str):
        choices = [s for s in _strings(doc) if s != value] or ["x"]
        parent[key] = rng.choice(choices)
    elif isinstance(value, list) and value:
        how = rng.choice(["shuffle", "drop", "duplicate"])
        if how == "shuffle":
            rng.shuffle(value)
        elif how == "drop":
            del value[rng.randrange(len(value))]
        else:
            value.insert(rng.randrange(len(value) + 1), copy.deepcopy(rng.choice(value)))
    elif isinstance(value, dict) and value:
        del value[rng.choice(sorted(value))]
    else:
        parent[key] = rng.choice([1, "x", None])
    new = parent.get(key) if isinstance(parent, dict) else parent[key]
    return f"tweak {where}: {value!r:.40} -> {new!r:.40}", False, None


# ------------------------------------------------------------------ graph mutations
def _graph_nodes(meta) -> list[tuple[dict, dict]]:
    """(node, the graph holding it) for every node of a graph description and its subgraphs."""
    out, stack = [], [meta]
    while stack:
        graph = stack.pop()
        for node in graph.get("nodes", []):
            out.append((node, graph))
            for path in _paths(node.get("attrs", {})):
                value = _get(node["attrs"], path)
                if isinstance(value, dict) and isinstance(value.get("nodes"), list):
                    stack.append(value)
    return out


def mutate_graph(meta: dict, rng: random.Random):
    """Change one node of a graph description (any op kind with equal chance), or its
    state, inputs or outputs; returns (description, must refuse if changed, text)."""
    nodes = _graph_nodes(meta)
    by_op = collections.defaultdict(list)
    for node, graph in nodes:
        by_op[node["op"]].append((node, graph))
    what = rng.choice(["attr"] * 5 + ["input", "output_shape", "output_dtype", "op", "state", "signature"])
    if what == "state" and meta.get("state"):
        spec = rng.choice(meta["state"])
        return _edit_spec(spec, rng, f"state {spec['name']}")
    if what == "signature":
        spec = rng.choice(meta["inputs"] or [{"shape": [], "dtype": "float32", "name": "?"}])
        description, _, text = _edit_spec(spec, rng, f"input {spec['name']}")
        return description, False, text  # a narrower or wider signature may be valid
    op = rng.choice(sorted(by_op))
    node, graph = rng.choice(by_op[op])
    here = f"node {node['name']} ({op})"
    if what == "attr":
        attrs = node.setdefault("attrs", {})
        if not attrs or rng.random() < 0.1:
            attrs["bogus"] = 1
            return f"{here}: add attr 'bogus'", True, None
        description, refuse, text = mutate_json(attrs, rng, strict_types=True)
        return f"{here}: {description}", refuse, text
    if what == "input":
        defined = [v["name"] for v in graph.get("inputs", []) + graph.get("constants", [])]
        defined += [o["name"] for n, _ in nodes for o in n.get("outputs", []) if n is not node]
        how = rng.choice(["rewire", "drop", "add"])
        if how == "rewire" and node["inputs"]:
            j = rng.randrange(len(node["inputs"]))
            node["inputs"][j] = rng.choice(defined or ["nowhere"])
            return f"{here}: rewire input {j} to {node['inputs'][j]}", False, None
        if how == "drop" and node["inputs"]:
            node["inputs"].pop(rng.randrange(len(node["inputs"])))
            return f"{here}: drop an input", True, None
        node["inputs"].append(rng.choice(defined or ["nowhere"]))
        return f"{here}: add an input", True, None
    if what == "op":
        same_arity = [n["op"] for n, _ in nodes if len(n["inputs"]) == len(node["inputs"]) and n["op"] != op]
        node["op"] = rng.choice(same_arity or ["no_such_op"])
        return f"{here}: op -> {node['op']}", False, None
    if not node.get("outputs"):
        node["outputs"] = [{"name": "phantom", "shape": [], "dtype": "float32"}]
        return f"{here}: add an output", True, None
    out = rng.choice(node["outputs"])
    if what == "output_shape":
        return _edit_spec(out, rng, f"{here} output {out['name']}", fields=("shape",))
    return _edit_spec(out, rng, f"{here} output {out['name']}", fields=("dtype",))


def _edit_spec(spec: dict, rng: random.Random, here: str, fields=("shape", "dtype")):
    field = rng.choice(fields)
    if field == "dtype":
        old = spec.get("dtype")
        spec["dtype"] = rng.choice([d for d in ["float32", "float64", "int32", "int64", "bool", "float16"] if d != old])
        if rng.random() < 0.15:
            spec["dtype"] = rng.choice(["complex128", "object", "", 7, None])
        return f"{here}: dtype {old} -> {spec['dtype']}", True, None
    shape = list(spec.get("shape") or [])
    old = list(shape)
    how = rng.choice(["grow", "shrink", "none", "add", "drop", "huge", "negative"])
    i = rng.randrange(len(shape)) if shape else 0
    if how == "add" or not shape:
        shape.insert(i, rng.choice([1, 2]))
    elif how == "drop":
        shape.pop(i)
    elif how == "grow":
        shape[i] = (shape[i] or 1) + 1
    elif how == "shrink":
        shape[i] = 0 if shape[i] in (None, 1) else shape[i] - 1
    elif how == "none":
        shape[i] = None if shape[i] is not None else 3
    elif how == "huge":
        shape[i] = rng.choice([2**31, 2**40, 2**62])
    else:
        shape[i] = rng.choice([-1, -5])
    spec["shape"] = shape
    return f"{here}: shape {old} -> {shape}", True, None


# ------------------------------------------------------------------ array and attribute mutations
def mutate_array(container: Container, rng: random.Random):
    entries = container.arrays()
    if not entries:
        return mutate_attrs(container, rng)
    entry = rng.choice(entries)
    value, here = entry["value"], f"array {entry['path']}"
    how = rng.choice(["reshape", "truncate", "rename", "drop", "extra", "dtype", "scalar"])
    if how == "reshape" and value.ndim >= 2:
        square = value.shape[0] == value.shape[1]
        entry["value"] = value.reshape(-1) if square else np.ascontiguousarray(np.swapaxes(value, 0, 1))
    elif how == "reshape":
        entry["value"] = value.reshape((1, *value.shape))
    elif how == "truncate" and value.ndim and value.shape[0] > 0:
        entry["value"] = value[:-1]
    elif how == "rename":
        entry["path"] = entry["path"] + "_x"
    elif how == "drop":
        container.entries.remove(entry)
    elif how == "extra":
        container.entries.append({"kind": "array", "path": entry["path"] + "_copy", "attrs": {}, "value": value})
        return f"{here}: an extra copy", False, None
    elif how == "dtype":
        dtype = rng.choice(["float64", "int32", "bool", "float16", "int64", "uint8"])
        with np.errstate(all="ignore"):
            entry["value"] = value.astype(dtype)
        return f"{here}: dtype -> {dtype}", False, None  # a cast a file may hold: checked by value, if at all
    else:
        entry["value"] = np.asarray(value.reshape(-1)[0] if value.size else 0, value.dtype)
        how = "scalar"
    return f"{here}: {how}", True, None


def mutate_attrs(container: Container, rng: random.Random):
    holders = [("/", container.attrs)] + [(e["path"], e["attrs"]) for e in container.entries if e["attrs"]]
    where, attrs = rng.choice(holders)
    key = rng.choice(sorted(attrs))
    old = attrs[key]
    how = rng.choice(["int", "string", "drop", "float", "swap"])
    if how == "drop":
        del attrs[key]
        return f"attr {where} {key}: dropped", False, None
    if how == "int":
        attrs[key] = rng.choice([0, 1, -1, 2**63 - 1, 2**64 - 1, (old + 1) if isinstance(old, int) else 5])
    elif how == "string":
        attrs[key] = rng.choice(["", "x", "tapeflow-weights", "Adam", "SGD", "tapeflow-model", "7"])
    elif how == "float":
        attrs[key] = rng.choice([0.5, math.nan, 1.0])
    else:
        others = [v for k, v in attrs.items() if k != key] or [0]
        attrs[key] = rng.choice(others)
    typed = type(attrs[key]) is not type(old) or how == "float"
    return f"attr {where} {key}: {old!r:.40} -> {attrs[key]!r:.40}", typed, None


# ------------------------------------------------------------------ one mutant
_PARSED: dict[str, Container] = {}  # the original files, parsed once


def make_mutant(original: str, kind: str, rng: random.Random, path: str) -> tuple[str, bool]:
    """Write one structure-mutated copy of `original` to `path`; returns (description,
    whether a loader must refuse it if what loads differs from the original)."""
    if original not in _PARSED:
        _PARSED[original] = Container(original)
    container = copy.deepcopy(_PARSED[original])
    roll = rng.random()
    if kind == "graph" and roll < 0.75:
        meta = container.docs["graph_json"]
        description, refuse, text = mutate_graph(meta, rng) if roll < 0.6 else mutate_json(meta, rng)
        name = "graph_json"
    elif container.docs and roll < 0.75:
        name = rng.choice(sorted(container.docs))
        description, refuse, text = mutate_json(container.docs[name], rng)
        description = f"{name}: {description}"
    elif roll < 0.9:
        description, refuse, text = mutate_array(container, rng)
        name = None
    else:
        description, refuse, text = mutate_attrs(container, rng)
        name = None
    if name == "extra" or (name in ("rng", "random") and "-> huge" in description):
        refuse = False  # any JSON value is valid extra data, and any 128-bit integer a valid generator state
    if text is not None and name is not None:
        container.texts[name] = text
    container.write(path)  # NaN and infinities are written as the bare words JSON does not allow
    return description, refuse


# ------------------------------------------------------------------ workers
class Worker:
    """A worker process; `load` returns its reply, or "hang", "run_hang" or "crash"."""

    def __init__(self, memory: int, tries: int = 20):
        for _ in range(tries - 1):  # another build of the kernels may leave them stale for a while
            try:
                self._start(memory)
                return
            except RuntimeError:
                time.sleep(15)
        self._start(memory)

    def _start(self, memory: int) -> None:
        env = {**os.environ, "OMP_NUM_THREADS": "1", "OPENBLAS_NUM_THREADS": "1"}
        root = os.path.dirname(os.path.dirname(WORKER))
        env["PYTHONPATH"] = os.pathsep.join(p for p in (root, env.get("PYTHONPATH")) if p)
        self.process = subprocess.Popen(
            [sys.executable, WORKER, "--memory", str(memory)],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.DEVNULL,
            text=True,
            env=env,
        )
        self.replies: queue.Queue = queue.Queue()
        threading.Thread(target=self._read, daemon=True).start()
        try:
            ready = self.replies.get(timeout=STARTUP_TIMEOUT_S)
        except queue.Empty:
            ready = None
        if ready != {"ready": True}:
            self.close()
            raise RuntimeError("the structure fuzz worker did not start")

    def _read(self) -> None:
        for line in self.process.stdout:
            self.replies.put(json.loads(line))
        self.replies.put(None)

    def ask(self, request: dict, timeout: float):
        self.process.stdin.write(json.dumps(request) + "\n")
        self.process.stdin.flush()
        stage = "load"
        deadline = time.monotonic() + timeout
        self.mutant = None
        while True:
            try:
                reply = self.replies.get(timeout=max(0.01, deadline - time.monotonic()))
            except queue.Empty:
                self.close()
                return "hang" if stage == "load" else "run_hang"
            if reply is None:
                return "crash"
            if reply == {"stage": "run"}:
                stage = "run"
                continue
            if "description" in reply:  # the mutant is written: the load's time starts now
                self.mutant = reply
                deadline = time.monotonic() + timeout
                continue
            return reply

    def close(self) -> None:
        if self.process.poll() is None:
            self.process.kill()
        self.process.wait()


def campaign(
    count: int, seed: int = 0, workers: int = 2, directory: str | None = None, memory=MEMORY_LIMIT, kinds=KINDS
):
    """{kind: {"counts": {outcome: n}, "examples": {bad outcome: [...]}}} for `count`
    mutants of each kind, loaded by `workers` worker processes."""
    own = tempfile.TemporaryDirectory() if directory is None else None
    directory = own.name if own else directory
    pool = [Worker(memory) for _ in range(workers)]
    try:
        originals = pool[0].ask({"make": directory}, timeout=300)
        assert isinstance(originals, dict), originals
        references = {}
        for name, spec in originals.items():
            reply = pool[0].ask({"original": name, "path": spec["path"]}, timeout=120)
            assert isinstance(reply, dict) and reply["outcome"] == "loaded", (name, reply)
            references[name] = reply["detail"]
        jobs: queue.Queue = queue.Queue()
        for kind in kinds:
            names = sorted(n for n, s in originals.items() if s["kind"] == kind)
            for i in range(count):
                name = names[i % len(names)]
                source = originals[name]["path"]
                path = os.path.join(directory, f"mutant-{kind}-{i}-{name}{os.path.splitext(source)[1]}")
                jobs.put((kind, name, {"original": name, "path": path, "source": source, "kind": kind, "seed": i}))
        results = collections.defaultdict(lambda: {"counts": collections.Counter(), "examples": {}})
        lock = threading.Lock()

        def serve(slot: int) -> None:
            while True:
                try:
                    kind, name, request = jobs.get_nowait()
                except queue.Empty:
                    return
                path = request["path"]
                reply = pool[slot].ask({**request, "seed": f"{seed}-{kind}-{request['seed']}"}, LOAD_TIMEOUT_S)
                mutant = pool[slot].mutant or {"description": "(the worker failed while writing it)", "refuse": True}
                description, refuse = mutant["description"], mutant["refuse"]
                if isinstance(reply, str):
                    outcome, detail = reply, ""
                    pool[slot].close()
                    pool[slot] = Worker(memory)
                else:
                    outcome, detail = reply["outcome"], reply["detail"]
                    if outcome == "loaded":
                        same = detail == references[name]
                        outcome = "same" if same else ("misload" if refuse else "changed")
                with lock:
                    results[kind]["counts"][outcome] += 1
                    done = sum(sum(r["counts"].values()) for r in results.values())
                    if done % 100 == 0:  # progress of a long campaign, on stderr
                        print(f"{done} of {count * len(kinds)} mutants loaded", file=sys.stderr, flush=True)
                    if outcome in BAD + NOTED:
                        examples = results[kind]["examples"].setdefault(outcome, [])
                        if len(examples) < 8:
                            examples.append(f"{os.path.basename(path)}: {description} => {detail[:240]}")
                if outcome in BAD and own is None and os.path.exists(path):
                    os.rename(path, f"{path}.{outcome}")
                elif os.path.exists(path):
                    os.remove(path)

        threads = [threading.Thread(target=serve, args=(slot,)) for slot in range(workers)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        return {kind: {"counts": dict(r["counts"]), "examples": r["examples"]} for kind, r in results.items()}
    finally:
        for worker in pool:
            worker.close()
        if own:
            own.cleanup()


def table(results: dict) -> str:
    """The outcome counts as a Markdown table, kinds by row."""
    columns = ["refused", "same", "changed", *NOTED, *BAD]
    lines = ["| kind | " + " | ".join(columns) + " |", "|" + "---|" * (len(columns) + 1)]
    for kind, result in results.items():
        lines.append(f"| {kind} | " + " | ".join(str(result["counts"].get(c, 0)) for c in columns) + " |")
    return "\n".join(lines)


@pytest.mark.slow
@pytest.mark.timeout(1200)
def test_structure_mutants_of_every_file_kind_load_soundly_or_are_refused_naming_the_file():
    results = campaign(count=SLOW_TEST_COUNT, seed=1, workers=2)
    for kind in KINDS:
        counts = results[kind]["counts"]
        assert sum(counts.values()) == SLOW_TEST_COUNT and counts.get("refused", 0) > 0, (kind, counts)
        bad = {k: counts[k] for k in BAD if counts.get(k)}
        assert not bad, (kind, bad, results[kind]["examples"])


def _main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--count", type=int, default=2000, help="mutants per kind")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--keep", default=None, help="a directory to keep the bad mutants in")
    parser.add_argument("--memory", type=int, default=MEMORY_LIMIT, help="each worker's address-space limit (bytes)")
    parser.add_argument("--kinds", nargs="+", choices=KINDS, default=KINDS, help="the file kinds to mutate")
    args = parser.parse_args()
    if args.keep:
        os.makedirs(args.keep, exist_ok=True)
    start = time.monotonic()
    results = campaign(args.count, args.seed, args.workers, args.keep, args.memory, args.kinds)
    print(json.dumps(results, indent=1))
    print(table(results))
    print(f"{time.monotonic() - start:.0f} s")


if __name__ == "__main__":
    _main()


# ------------------------------------------------------------------ what the campaign found
@pytest.fixture
def small_model_file(tmp_path):
    import tapeflow as tp

    model = tp.Sequential([tp.Input((3,)), tp.layers.Dense(2, name="d")], name="small")
    path = str(tmp_path / "small.keras")
    model.save(path)
    return path


def _edited(source: str, target: str, edit) -> str:
    container = Container(source)
    edit(container)
    container.write(target)
    return target


def test_a_key_given_twice_in_a_json_document_is_refused(small_model_file, tmp_path):
    import tapeflow as tp

    def twice(container):
        text = json.dumps(container.docs["config"])
        container.texts["config"] = text.replace('"units": 2', '"units": 2, "units": 3')
        assert container.texts["config"] != text

    path = _edited(small_model_file, str(tmp_path / "twice.keras"), twice)
    with pytest.raises(ValueError, match=r"twice\.keras.*'units' appears twice"):
        tp.models.load_model(path)


def test_a_layer_named_by_a_number_is_refused_naming_the_file(small_model_file, tmp_path):
    import tapeflow as tp

    def number(container):
        container.docs["config"]["config"]["layers"][-1]["config"]["name"] = 2.5

    path = _edited(small_model_file, str(tmp_path / "number.keras"), number)
    with pytest.raises((ValueError, TypeError), match=r"number\.keras.*name must be a string"):
        tp.models.load_model(path)


@pytest.mark.parametrize(
    ("fn", "op", "attrs", "message"),
    [
        ("sum", "sum", {"axes": {"tuple": [1, 1]}}, "repeated"),
        ("sum", "sum", {"axes": {"tuple": [1.0]}}, "must be an int"),
        ("sum", "sum", {"keepdims": "x"}, "keepdims must be a bool"),
        ("full_like", "full_like", {"value": "x"}, "fill value must be a number"),
        ("one_hot", "one_hot", {"off_value": None}, "off_value must be a number"),
        ("lstm", "lstm_sequence", {"go_backwards": 1e-300}, "go_backwards must be a bool"),
        ("fused", "fused_elementwise", {"program": {"tuple": [{"tuple": ["input", False]}]}}, "is invalid"),
    ],
)
def test_graph_attributes_the_kernel_would_reject_are_refused_at_load(tmp_path, fn, op, attrs, message):
    import tapeflow as tp
    from tapeflow.ops.nn.recurrent import lstm_sequence

    graphs = {
        "sum": lambda x: tp.sum(x, axis=1),
        "full_like": lambda x: tp.full_like(x, 2.0),
        "one_hot": lambda x: tp.one_hot(tp.argmax(x, axis=1), 3),
        "lstm": lambda x: lstm_sequence(
            tp.reshape(x, (2, 3, 1)) * tp.ones((4,)), tp.zeros((2, 1)), tp.zeros((2, 1)), k
        )[0],
        "fused": lambda x: tp.exp(x - 1.0) * 2.0,
    }
    k = tp.ones((1, 4))
    source = str(tmp_path / "source.tfg")
    # full_like of a static shape folds into a constant: its node stays where the batch is open
    spec = tp.TensorSpec((None, 3) if fn == "full_like" else (2, 3))
    tp.freeze(graphs[fn], spec).save(source)

    def edit(container):
        node = next(n for n in container.docs["graph_json"]["nodes"] if n["op"] == op)
        node["attrs"].update(attrs)

    path = _edited(source, str(tmp_path / "edited.tfg"), edit)
    with pytest.raises(ValueError, match=rf"edited\.tfg.*{message}"):
        tp.load_graph(path)


@pytest.mark.parametrize(
    "edit",
    [
        {"has_uint32": True},
        {"has_uint32": -1},
        {"uinteger": 2.5},
        {"state": {"state": 5, "inc": 0.5}},
        {"state": {"state": 2**130, "inc": 3}},
    ],
)
def test_a_generator_state_that_is_not_plain_counts_is_refused(tmp_path, edit):
    import tapeflow as tp

    model = tp.Sequential([tp.Input((3,)), tp.layers.Dense(2, name="d")])
    source = str(tmp_path / "source.h5")
    tp.io.save_checkpoint(source, model, None, epoch=1)

    def change(container):
        container.docs["rng"]["global"].update(edit)

    path = _edited(source, str(tmp_path / "edited.h5"), change)
    with pytest.raises(ValueError, match=r"edited\.h5.*random state 'global' is not a valid PCG64 state"):
        tp.io.load_checkpoint(path, model, None)


def test_mutants_are_valid_containers_of_the_original_kind(tmp_path):
    import tapeflow as tp

    source = str(tmp_path / "source.tfg")
    tp.freeze(lambda x: tp.sum(x * 2.0, axis=1), tp.TensorSpec((2, 3))).save(source)
    outcomes = collections.Counter()
    for i in range(20):
        path = str(tmp_path / f"m{i}.tfg")
        make_mutant(source, "graph", random.Random(i), path)
        try:
            tp.load_graph(path)
            outcomes["loaded"] += 1
        except ValueError as err:
            assert f"m{i}.tfg" in str(err)
            assert "checksum" not in str(err) and "manifest" not in str(err), err
            outcomes["refused"] += 1
    assert outcomes["refused"] > 0


def test_lstm_inputs_whose_batch_sizes_differ_only_at_run_time_are_refused_before_the_kernel():
    # a graph with a dynamic batch, edited so that its initial state has one row fewer than
    # its inputs, passes every check at load; the kernel must not index past the state
    from tapeflow.backends.numpy_recurrent import lstm_sequence

    xp, kernel = np.zeros((4, 3, 8), np.float32), np.zeros((2, 8), np.float32)
    state = np.zeros((3, 2), np.float32)
    with pytest.raises(ValueError, match=r"shapes do not fit together.*h0 \(3, 2\)"):
        lstm_sequence(xp, state, state, kernel)
