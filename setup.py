"""Build tapeflow: the pure-Python package in lib/ plus the Cython kernels in lib/_kernels/.

    python setup.py build_ext --inplace      # .so files land next to the .pyx sources
    pip install -e . --no-build-isolation    # editable install

Each kernel module gets the sha256 of its .pyx baked in (``SOURCE_SHA256``) so that
``tapeflow._kernels`` can refuse to import a stale build, and reports whether it was
compiled with OpenMP (``OPENMP``). Set TAPEFLOW_OPENMP=0 to build without OpenMP.
"""

import importlib.util
import os
import subprocess
import sys
import sysconfig
import tempfile
from pathlib import Path

import numpy
from Cython.Build import cythonize
from setuptools import Extension, find_packages, setup

ROOT = Path(__file__).resolve().parent
KERNEL_DIR = Path("lib") / "_kernels"


def compiler_supports_openmp() -> bool:
    """Compile and link a tiny OpenMP program with the C compiler Python was built with."""
    compiler = os.environ.get("CC") or sysconfig.get_config_var("CC") or "cc"
    source = "#include <omp.h>\nint main(void) { return omp_get_max_threads() > 0 ? 0 : 1; }\n"
    with tempfile.TemporaryDirectory() as tmp:
        src = Path(tmp) / "omp_check.c"
        src.write_text(source)
        cmd = [*compiler.split(), "-fopenmp", str(src), "-o", str(Path(tmp) / "omp_check")]
        try:
            result = subprocess.run(cmd, capture_output=True, timeout=60)
        except (OSError, subprocess.SubprocessError):
            return False
    return result.returncode == 0


def _load_source_hash():
    spec = importlib.util.spec_from_file_location("source_hash", ROOT / KERNEL_DIR / "source_hash.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module.source_sha256


source_sha256 = _load_source_hash()


def kernel_extensions() -> list[Extension]:
    openmp = os.environ.get("TAPEFLOW_OPENMP", "1") != "0" and compiler_supports_openmp()
    if not openmp:
        print("tapeflow: building kernels without OpenMP (single-threaded)", file=sys.stderr)
    omp_flags = ["-fopenmp"] if openmp else []
    extensions = []
    for pyx in sorted((ROOT / KERNEL_DIR).glob("*.pyx")):
        extensions.append(
            Extension(
                f"tapeflow._kernels.{pyx.stem}",
                sources=[str(KERNEL_DIR / pyx.name)],
                include_dirs=[numpy.get_include()],
                define_macros=[
                    ("NPY_NO_DEPRECATED_API", "NPY_1_7_API_VERSION"),
                    ("TAPEFLOW_SOURCE_SHA256", f'"{source_sha256(pyx)}"'),
                ],
                # No errno and no floating-point traps to preserve: loops with selects
                # (relu, clamps, NaN checks) can then be vectorized.
                extra_compile_args=["-O3", "-fno-math-errno", "-fno-trapping-math", *omp_flags],
                extra_link_args=omp_flags,
            )
        )
    return extensions


setup(
    package_dir={"tapeflow": "lib"},
    packages=["tapeflow", *(f"tapeflow.{name}" for name in find_packages("lib"))],
    package_data={"tapeflow._kernels": ["*.pyx", "*.pxi"], "tapeflow._kernels.cuda": ["*.cu"]},
    exclude_package_data={"tapeflow._kernels": ["*.c"]},
    ext_modules=cythonize(
        kernel_extensions(),
        compiler_directives={
            "language_level": 3,
            "boundscheck": False,
            "wraparound": False,
            "cdivision": True,
            "initializedcheck": False,
        },
    ),
    zip_safe=False,
)
