"""The fingerprint a kernel module is built from: its .pyx plus the .pxi files it includes.

Used by setup.py when building and by tapeflow._kernels when importing, so that a module
built from older sources is refused.

>>> from pathlib import Path
>>> len(source_sha256(Path(__file__).with_name("gemm.pyx")))
64
"""

from __future__ import annotations

import hashlib
import re
from pathlib import Path

_INCLUDE = re.compile(rb'^include\s+"([^"]+)"', re.MULTILINE)


def source_sha256(pyx: Path) -> str:
    """sha256 of `pyx` followed by each file it includes, in the order it includes them."""
    source = pyx.read_bytes()
    digest = hashlib.sha256(source)
    for name in _INCLUDE.findall(source):
        digest.update((pyx.parent / name.decode()).read_bytes())
    return digest.hexdigest()
