"""Files written atomically, and the temp files of killed writers cleaned up safely.

`atomic_file` (and `atomic_h5` on it) writes to a temp file beside the target, fsyncs it and renames it over the
target (the file a symlink points to; the target keeps its permission bits): a process
killed mid-write leaves the previous file as it was (plus, at worst, a temp file whose
name starts with `temp_prefix(path)`). A writer holds an exclusive
`flock` on its temp file from creation to rename, so `remove_temp_files`, which every
save of a target runs first, deletes only the temp files nobody holds: those of writers
that died.

>>> import os, tempfile
>>> path = os.path.join(tempfile.mkdtemp(), "x.h5")
>>> with atomic_h5(path) as f:
...     f["a"] = [1, 2, 3]
>>> os.path.exists(path), [n for n in os.listdir(os.path.dirname(path)) if n.endswith(".tmp")]
(True, [])
"""

from __future__ import annotations

import contextlib
import os
import secrets
import stat

import h5py

try:  # POSIX; elsewhere temp files are only removed by name
    import fcntl
except ImportError:  # pragma: no cover - not on the platforms tapeflow is tested on
    fcntl = None


def temp_prefix(path: str) -> str:
    """The name prefix of the temp files written for `path`."""
    return f".{os.path.basename(path)}."


def _try_lock(fd: int, blocking: bool) -> bool:
    if fcntl is None:
        return True
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | (0 if blocking else fcntl.LOCK_NB))
    except BlockingIOError:
        return False
    return True


def _is_temp_name(name: str, prefix: str) -> bool:
    middle = name[len(prefix) : -len(".tmp")]
    return name.startswith(prefix) and name.endswith(".tmp") and middle.isalnum()


def remove_temp_files(path) -> list[str]:
    """Delete the temp files that writers of `path` killed mid-save left behind; returns
    their paths. A temp file a live writer still holds is left alone.

    >>> import os, tempfile
    >>> path = os.path.join(tempfile.mkdtemp(), "ckpt.h5")
    >>> open(os.path.join(os.path.dirname(path), ".ckpt.h5.0a1b.tmp"), "w").close()
    >>> [os.path.basename(p) for p in remove_temp_files(path)]
    ['.ckpt.h5.0a1b.tmp']
    """
    path = os.fspath(path)
    directory = os.path.dirname(os.path.abspath(path))
    prefix = temp_prefix(path)
    removed = []
    with contextlib.suppress(FileNotFoundError, NotADirectoryError):
        names = sorted(os.listdir(directory))
        for name in names:
            if not _is_temp_name(name, prefix):
                continue
            full = os.path.join(directory, name)
            try:
                fd = os.open(full, os.O_RDONLY | os.O_NONBLOCK | getattr(os, "O_NOFOLLOW", 0))
            except OSError:
                continue
            try:
                st = os.fstat(fd)
                if not stat.S_ISREG(st.st_mode) or not _try_lock(fd, blocking=False):
                    continue  # not a file we wrote, or a writer still holds it
                if os.stat(full, follow_symlinks=False).st_ino == st.st_ino:
                    os.remove(full)
                    removed.append(full)
            except OSError:
                continue
            finally:
                os.close(fd)
    return removed


def _locked_temp(path: str) -> tuple[str, int]:
    """A new temp file beside `path` and an fd holding its lock (retried if a cleaner
    removed it between its creation and the lock)."""
    directory = os.path.dirname(os.path.abspath(path))
    while True:
        tmp = os.path.join(directory, f"{temp_prefix(path)}{secrets.token_hex(6)}.tmp")
        fd = os.open(tmp, os.O_RDWR | os.O_CREAT | os.O_EXCL, 0o666)  # mode from the umask
        _try_lock(fd, blocking=True)
        with contextlib.suppress(FileNotFoundError):
            if os.stat(tmp).st_ino == os.fstat(fd).st_ino:
                return tmp, fd
        os.close(fd)


@contextlib.contextmanager
def atomic_file(path):
    """The path of a temp file beside `path`, renamed over `path` once the block completes.
    Stale temp files of `path` (from killed writers) are removed first.

    >>> import os, tempfile
    >>> target = os.path.join(tempfile.mkdtemp(), "v.txt")
    >>> with atomic_file(target) as tmp:
    ...     with open(tmp, "w") as f:
    ...         _ = f.write("ok")
    >>> open(target).read()
    'ok'
    """
    path = os.path.realpath(os.fspath(path))  # through a symlink: the link stays, its target is replaced
    directory = os.path.dirname(path)
    remove_temp_files(path)
    tmp, lock_fd = _locked_temp(path)
    try:
        try:
            yield tmp
            with contextlib.suppress(FileNotFoundError):  # a new file keeps the umask's mode
                os.chmod(tmp, stat.S_IMODE(os.stat(path).st_mode))  # an existing one keeps its own
            os.fsync(lock_fd)
            os.replace(tmp, path)
        except BaseException:
            with contextlib.suppress(OSError):
                os.remove(tmp)
            raise
    finally:
        os.close(lock_fd)
    with contextlib.suppress(OSError):  # make the rename itself durable (not possible everywhere)
        fd = os.open(directory, os.O_RDONLY)
        try:
            os.fsync(fd)
        finally:
            os.close(fd)


@contextlib.contextmanager
def atomic_h5(path):
    """An h5py.File on a temp file beside `path` that replaces `path` only once complete."""
    with atomic_file(path) as tmp, h5py.File(tmp, "w", locking=False) as f:  # the flock guards the file
        yield f
