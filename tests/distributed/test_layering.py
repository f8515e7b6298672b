"""Imports point one way: only `tapeflow/__init__.py` reaches into `tapeflow.distributed`
from the rest of the package, and Dask is imported in `_compat` alone."""

import ast
import pathlib

import tapeflow

LIB = pathlib.Path(tapeflow.__file__).resolve().parent


def imported_modules(path: pathlib.Path) -> set[str]:
    names = set()
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            names.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module:
            names.add(node.module)
            names.update(f"{node.module}.{alias.name}" for alias in node.names)
    return names


def sources():
    return [(p.relative_to(LIB).as_posix(), imported_modules(p)) for p in sorted(LIB.rglob("*.py"))]


def test_only_the_package_root_imports_tapeflow_distributed():
    offenders = [
        name
        for name, modules in sources()
        if not name.startswith("distributed/")
        and name != "__init__.py"
        and any(m == "tapeflow.distributed" or m.startswith("tapeflow.distributed.") for m in modules)
    ]
    assert offenders == []


def test_dask_is_imported_only_in_compat():
    offenders = [
        name
        for name, modules in sources()
        if name != "_compat.py" and any(m.split(".")[0] in ("dask", "distributed") for m in modules)
    ]
    assert offenders == []
