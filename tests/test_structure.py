"""The package's shape: imports point one way, no module cycles, no import hidden in a
function to dodge one, a short root, and device families and compiled kernels behind
`backends/`.

Every import statement of every module under lib/ counts, also those inside functions.
The stages are DESIGN.md's import order, one folder (or root module) to a stage: the
primitives, the engine (tensor, ops, autodiff, graph), the data pipeline, the Keras
building blocks (layers, losses, metrics, optimizers ...), what assembles them (models,
trainers, saving, callbacks ...), then the distributed strategies.
"""

from __future__ import annotations

import ast
from pathlib import Path

LIB = Path(__file__).resolve().parent.parent / "lib"

STAGES = [
    {"_kernels", "_compat", "files", "dtypes", "devices", "tree", "serialization"},
    {"backends"},
    {"tensor"},
    {"ops", "dlpack"},
    {"autodiff", "graph"},
    {"data", "queue", "profiler"},
    {
        "initializers",
        "regularizers",
        "constraints",
        "mixed_precision",
        "losses",
        "metrics",
        "optimizers",
        "layers",
        "activations",
    },
    {"models", "trainers", "saving", "callbacks", "io", "config", "word2vec", "utils", "backend"},
    {"distributed"},
    {"__init__", "cli"},
]
STAGE = {part: i for i, parts in enumerate(STAGES) for part in parts}
MAY_NAME_DEVICES = ("backends", "devices")  # where "cpu" and the compiled kernels may appear


def _modules() -> dict[str, Path]:
    found = {}
    for path in sorted(LIB.rglob("*.py")):
        parts = list(path.relative_to(LIB).with_suffix("").parts)
        if parts[-1] == "__init__":
            parts.pop()
        found[".".join(["tapeflow", *parts])] = path
    return found


MODULES = _modules()


def _resolve(name: str) -> str | None:
    """The longest known module `name` refers to (an attribute import names its module)."""
    while name not in MODULES and "." in name:
        name = name.rsplit(".", 1)[0]
    return name if name in MODULES else None


def _imports(module: str, path: Path) -> set[str]:
    package = module if path.name == "__init__.py" else module.rsplit(".", 1)[0]
    found = set()
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            names = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                anchor = package.split(".")[: len(package.split(".")) - node.level + 1]
                base = ".".join([*anchor, *([base] if base else [])])
            names = [f"{base}.{alias.name}" for alias in node.names]
        else:
            continue
        found.update(m for m in map(_resolve, (n for n in names if n.startswith("tapeflow"))) if m and m != module)
    return found


IMPORTS = {module: _imports(module, path) for module, path in MODULES.items()}


def _stage(module: str) -> int:
    parts = module.split(".")
    return STAGE[parts[1] if len(parts) > 1 else "__init__"]


def _home(module: str) -> str:
    parts = module.split(".")
    return parts[1] if len(parts) > 1 else "__init__"


def test_every_module_has_a_stage():
    unplaced = sorted({_home(m) for m in MODULES} - set(STAGE))
    assert not unplaced, f"modules with no stage in STAGES: {unplaced}"


def test_no_module_imports_a_later_stage():
    upward = [
        f"{module} (stage {_stage(module)}) imports {target} (stage {_stage(target)})"
        for module, targets in IMPORTS.items()
        for target in sorted(targets)
        if _stage(target) > _stage(module)
    ]
    assert not upward, "\n".join(upward)


def _cycles() -> list[list[str]]:
    """Strongly connected components of more than one module (iterative Tarjan)."""
    index, low, on_stack, stack, found = {}, {}, set(), [], []
    for root in MODULES:
        if root in index:
            continue
        work = [(root, iter(sorted(IMPORTS[root])))]
        index[root] = low[root] = len(index)
        stack.append(root)
        on_stack.add(root)
        while work:
            node, children = work[-1]
            child = next(children, None)
            if child is not None:
                if child not in index:
                    index[child] = low[child] = len(index)
                    stack.append(child)
                    on_stack.add(child)
                    work.append((child, iter(sorted(IMPORTS[child]))))
                elif child in on_stack:
                    low[node] = min(low[node], index[child])
                continue
            work.pop()
            if work:
                low[work[-1][0]] = min(low[work[-1][0]], low[node])
            if low[node] == index[node]:
                component = []
                while True:
                    member = stack.pop()
                    on_stack.discard(member)
                    component.append(member)
                    if member == node:
                        break
                if len(component) > 1:
                    found.append(sorted(component))
    return found


def test_no_import_cycles():
    cycles = _cycles()
    assert not cycles, f"import cycles: {cycles}"


def test_the_cycle_finder_finds_cycles():
    saved = dict(IMPORTS)
    try:
        IMPORTS["tapeflow.dtypes"] = IMPORTS["tapeflow.dtypes"] | {"tapeflow.tensor"}
        assert ["tapeflow.dtypes", "tapeflow.tensor"] in _cycles()
    finally:
        IMPORTS.clear()
        IMPORTS.update(saved)


def _outside_backends(module: str) -> bool:
    return _home(module) not in MAY_NAME_DEVICES and _home(module) != "_kernels"


# the fused elementwise program's opcode table: plain Python, shared by the compiled kernel and the fused op
PLAIN_KERNEL_TABLES = {"tapeflow._kernels.fusion_opcodes"}


def test_compiled_kernels_are_imported_only_by_backends():
    users = sorted(
        m
        for m, targets in IMPORTS.items()
        if _outside_backends(m) and any(_home(t) == "_kernels" and t not in PLAIN_KERNEL_TABLES for t in targets)
    )
    assert not users, f"modules importing tapeflow._kernels outside backends/ and devices.py: {users}"


def test_no_device_family_is_written_outside_backends():
    literals = [
        f"{MODULES[m].relative_to(LIB)}:{node.lineno}"
        for m in MODULES
        if _outside_backends(m)
        for node in ast.walk(ast.parse(MODULES[m].read_text()))
        if isinstance(node, ast.Constant) and node.value in ("cpu", "gpu", "xla")
    ]
    assert not literals, f"device family literals outside backends/ and devices.py: {literals}"


ROOT_MODULES_AT_MOST = 13  # the rest of lib/ lives in folders that name their jobs


def test_the_root_of_lib_is_short():
    root = sorted(p.name for p in LIB.glob("*.py"))
    assert len(root) <= ROOT_MODULES_AT_MOST, f"{len(root)} modules at lib/'s root: {root}"


def _imports_inside_functions(path: Path):
    """(line, statement) of each tapeflow import inside a function body without a
    comment saying 'lazily' on the line above."""
    source = path.read_text()
    lines = source.splitlines()
    for function in ast.walk(ast.parse(source)):
        if not isinstance(function, ast.FunctionDef | ast.AsyncFunctionDef):
            continue
        for node in ast.walk(function):
            if isinstance(node, ast.Import):
                names = [alias.name for alias in node.names]
            elif isinstance(node, ast.ImportFrom):
                names = [("." * node.level) + (node.module or "")]
            else:
                continue
            if any(n.startswith(("tapeflow", ".")) for n in names):
                above = lines[node.lineno - 2] if node.lineno > 1 else ""
                if not (above.strip().startswith("#") and "lazily" in above):
                    yield node.lineno, lines[node.lineno - 1].strip()


def test_no_tapeflow_import_hides_in_a_function():
    hidden = [
        f"{MODULES[m].relative_to(LIB)}:{line}: {text}"
        for m in MODULES
        for line, text in _imports_inside_functions(MODULES[m])
    ]
    assert not hidden, "imports inside functions (say 'lazily' on the line above if on purpose):\n" + "\n".join(hidden)
