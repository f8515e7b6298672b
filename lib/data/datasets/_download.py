"""Downloads checked against a sha256 before they replace anything on disk.

>>> import hashlib, os, tempfile
>>> path = os.path.join(tempfile.mkdtemp(), "f")
>>> with open(path, "wb") as f:
...     _ = f.write(b"abc")
>>> sha256_of(path) == hashlib.sha256(b"abc").hexdigest()
True
"""

from __future__ import annotations

import hashlib
import os
import tempfile
import urllib.request
from pathlib import Path


def fetch(url: str, target: Path, expected_sha256: str, who: str) -> None:
    """Stream `url` into a temporary file beside `target`, check its sha256, then rename it.

    `who` names the caller in errors. A failed or mismatching download leaves `target` as it was.
    """
    fd, tmp = tempfile.mkstemp(dir=target.parent, prefix=target.name + ".", suffix=".part")
    try:
        digest = hashlib.sha256()
        with os.fdopen(fd, "wb") as out:
            try:
                with urllib.request.urlopen(url, timeout=60) as response:
                    while chunk := response.read(1 << 20):
                        digest.update(chunk)
                        out.write(chunk)
            except OSError as err:
                raise OSError(f"{who}: could not download {url}: {err}") from err
        if digest.hexdigest() != expected_sha256:
            raise ValueError(
                f"{who}: checksum mismatch for {url}: sha256 {digest.hexdigest()}, "
                f"expected {expected_sha256}; the file was discarded"
            )
        os.replace(tmp, target)
    finally:
        if os.path.exists(tmp):
            os.remove(tmp)


def sha256_of(path) -> str:
    """The hex sha256 of a file's bytes."""
    digest = hashlib.sha256()
    with open(path, "rb") as f:
        while chunk := f.read(1 << 20):
            digest.update(chunk)
    return digest.hexdigest()
