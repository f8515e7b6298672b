"""Keras 3's `get_file`: a file from a URL (or `file://` path) cached under ~/.keras,
checked against a hash and optionally extracted."""

from __future__ import annotations

import hashlib
import os
import shutil
import tarfile
import tempfile
import urllib.error
import urllib.parse
import urllib.request
import warnings
import zipfile

from tapeflow.utils.progbar import Progbar

DOWNLOAD_TIMEOUT_S = 15  # a network that does not answer fails fast instead of hanging


def _cache_root(cache_dir) -> str:
    root = os.path.expanduser(cache_dir or os.environ.get("KERAS_HOME", os.path.join("~", ".keras")))
    if not os.access(root, os.W_OK) and os.path.exists(root):
        root = os.path.join(tempfile.gettempdir(), ".keras")
    return root


def get_file(
    fname=None,
    origin=None,
    untar=False,
    md5_hash=None,
    file_hash=None,
    cache_subdir="datasets",
    hash_algorithm="auto",
    extract=False,
    archive_format="auto",
    cache_dir=None,
    force_download=False,
) -> str:
    """The local path of `origin`'s file, downloaded into `cache_dir/cache_subdir` unless
    a copy with the right hash is already there; with `extract=True`, the folder its tar
    or zip archive was extracted into.

    `file_hash` is a sha256 (64 hex digits) or md5 hex digest; a download whose hash does
    not match is removed and raises ValueError.

    >>> import hashlib, os, pathlib, tempfile
    >>> source = os.path.join(tempfile.mkdtemp(), "data.txt")
    >>> _ = pathlib.Path(source).write_text("hello")
    >>> digest = hashlib.sha256(b"hello").hexdigest()
    >>> path = get_file(origin=pathlib.Path(source).as_uri(), file_hash=digest, cache_dir=tempfile.mkdtemp())
    Downloading data from file://...
    >>> open(path).read()
    'hello'
    """
    if origin is None:
        raise ValueError("get_file: give origin=, the URL of the file to download")
    if md5_hash is not None and file_hash is None:
        file_hash, hash_algorithm = md5_hash, "md5"
    if hash_algorithm not in ("auto", "md5", "sha256"):
        raise ValueError(f'get_file: hash_algorithm must be "auto", "md5" or "sha256", got {hash_algorithm!r}')
    folder = os.path.join(_cache_root(cache_dir), cache_subdir)
    os.makedirs(folder, exist_ok=True)
    name = os.fspath(fname) if fname else ""
    if not name:
        name = os.path.basename(urllib.parse.urlsplit(origin).path)
        if not name:
            raise ValueError(f"get_file: cannot tell a file name from origin {origin!r}; give fname=")
    elif os.sep in name:
        raise ValueError(f"get_file: fname must be a file name, not a path (use cache_dir=), got {name!r}")
    if extract or untar:
        if fname and "." in name:
            target = os.path.join(folder, name)
            extracted = os.path.join(folder, f"{name[: name.find('.')]}_extracted")
        else:
            target, extracted = os.path.join(folder, f"{name}_archive"), os.path.join(folder, name)
    else:
        target = os.path.join(folder, name)
    download = force_download or not os.path.exists(target)
    if not download and file_hash is not None and not validate_file(target, file_hash, hash_algorithm):
        print(f"A local file was found, but its {hash_algorithm} hash does not match {file_hash}; downloading again.")
        download = True
    if download:
        _download(origin, target)
        if file_hash is not None and not validate_file(target, file_hash, hash_algorithm):
            os.remove(target)
            raise ValueError(
                f"get_file: the file from {origin} is incomplete or corrupted: its {hash_algorithm} hash does not "
                f"match {file_hash}"
            )
    if extract or untar:
        if not extract_archive(target, extracted, "tar" if untar else archive_format):
            warnings.warn(f"get_file: could not extract {target} as {archive_format}", stacklevel=2)
        return extracted
    return target


def _download(origin: str, target: str) -> None:
    print(f"Downloading data from {origin}")
    partial = target + ".part"
    try:
        with urllib.request.urlopen(origin, timeout=DOWNLOAD_TIMEOUT_S) as response, open(partial, "wb") as out:
            size = response.headers.get("Content-Length") if getattr(response, "headers", None) else None
            bar = Progbar(int(size) if size else None) if size and int(size) > (1 << 20) else None
            done = 0
            while chunk := response.read(1 << 16):
                out.write(chunk)
                done += len(chunk)
                if bar is not None:
                    bar.update(min(done, bar.target))
        os.replace(partial, target)
    except (urllib.error.URLError, OSError, ValueError) as err:
        reason = getattr(err, "reason", err)
        raise OSError(
            f"get_file: could not download {origin}: {reason}. If this machine is offline, copy the file to a "
            f"local path and pass origin='file://<path>' or place it at {target}"
        ) from err
    finally:
        if os.path.exists(partial):
            os.remove(partial)


def _hasher(algorithm: str, file_hash: str | None):
    if algorithm == "sha256" or (algorithm == "auto" and file_hash is not None and len(file_hash) == 64):
        return hashlib.sha256()
    return hashlib.md5()


def hash_file(path, algorithm: str = "sha256", chunk_size: int = 65535) -> str:
    """The hex digest ("sha256" or "md5") of a file's bytes."""
    hasher = _hasher(algorithm, None) if isinstance(algorithm, str) else algorithm
    with open(path, "rb") as f:
        while chunk := f.read(chunk_size):
            hasher.update(chunk)
    return hasher.hexdigest()


def validate_file(path, file_hash: str, algorithm: str = "auto", chunk_size: int = 65535) -> bool:
    """Whether the file's digest equals `file_hash` ("auto": sha256 for 64 digits, else md5)."""
    return hash_file(path, _hasher(algorithm, file_hash), chunk_size) == str(file_hash)


def _inside(base: str, path: str) -> bool:
    resolved = os.path.realpath(os.path.join(base, path))
    return os.path.commonpath([resolved, base]) == base


def extract_archive(path, into=".", archive_format="auto") -> bool:
    """Extract a tar or zip archive into `into`; False when `path` is neither. Members
    that would land outside `into` (absolute paths, "..", links out) are skipped."""
    if archive_format is None:
        return False
    formats = (
        ["tar", "zip"]
        if archive_format == "auto"
        else [archive_format]
        if isinstance(archive_format, str)
        else list(archive_format)
    )
    base = os.path.realpath(into)
    for kind in formats:
        if kind not in ("tar", "zip"):
            raise ValueError(f'extract_archive: archive_format must be "tar", "zip" or "auto", got {kind!r}')
        if kind == "tar" and tarfile.is_tarfile(path):
            with tarfile.open(path) as archive:
                members = [m for m in archive.getmembers() if _inside(base, m.name)]
                _extract(archive.extractall, into, members=members, filter="data")
            return True
        if kind == "zip" and zipfile.is_zipfile(path):
            with zipfile.ZipFile(path) as archive:
                members = [m for m in archive.infolist() if _inside(base, m.filename)]
                _extract(archive.extractall, into, members=members)
            return True
    return False


def _extract(extractall, into: str, **kwargs) -> None:
    try:
        extractall(into, **kwargs)
    except (tarfile.TarError, RuntimeError, KeyboardInterrupt):
        if os.path.isfile(into):
            os.remove(into)
        elif os.path.isdir(into):
            shutil.rmtree(into)
        raise
