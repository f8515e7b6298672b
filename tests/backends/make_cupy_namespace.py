"""Writes `cupy_namespace.json`: the public names of CuPy's array module, its submodules the
backend reaches (linalg, fft, random, lib.stride_tricks), its ndarray's attributes and its
ufuncs. The strict stand-in offers exactly these. Run where CuPy imports (it needs no GPU):

    python tests/backends/make_cupy_namespace.py
"""

import json
import pathlib

SUBMODULES = ("linalg", "fft", "random", "lib.stride_tricks")


def public(module) -> list[str]:
    return sorted(n for n in dir(module) if not n.startswith("_"))


def main() -> None:
    import cupy
    import cupyx.scipy.special

    def submodule(path: str):
        module = cupy
        for part in path.split("."):
            module = getattr(module, part)
        return module

    names = {
        "cupy_version": cupy.__version__,
        "module": public(cupy),
        "ufuncs": sorted(n for n in public(cupy) if isinstance(getattr(cupy, n), cupy.ufunc)),
        "submodules": {path: public(submodule(path)) for path in SUBMODULES},
        "ndarray": public(cupy.ndarray),
        "special_ufuncs": sorted(
            n for n in public(cupyx.scipy.special) if isinstance(getattr(cupyx.scipy.special, n), cupy.ufunc)
        ),
    }
    target = pathlib.Path(__file__).with_name("cupy_namespace.json")
    target.write_text(json.dumps(names, indent=1) + "\n")


if __name__ == "__main__":
    main()
