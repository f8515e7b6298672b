"""Files written atomically and HDF5 files read without trusting them.

`atomic_h5` writes to a temp file beside the target, fsyncs it and renames it over
the target: a process killed mid-write leaves the previous file as it was (plus, at
worst, a temp file whose name starts with `temp_prefix(path)`). `hdf5_datasets` walks
a file that may be hostile: plain groups and numeric datasets reached by hard links
only; object, string, opaque, external and plugin-filtered data are refused.

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

import h5py


def temp_prefix(path: str) -> str:
    """The name prefix of the temp files written for `path`."""
    return f".{os.path.basename(path)}."


@contextlib.contextmanager
def atomic_file(path):
    """The path of a temp file beside `path`, renamed over `path` once the block completes.

    >>> import os, tempfile
    >>> target = os.path.join(tempfile.mkdtemp(), "v.txt")
    >>> with atomic_file(target) as tmp:
    ...     with open(tmp, "w") as f:
    ...         _ = f.write("ok")
    >>> open(target).read()
    'ok'
    """
    path = os.fspath(path)
    directory = os.path.dirname(os.path.abspath(path))
    tmp = os.path.join(directory, f"{temp_prefix(path)}{secrets.token_hex(6)}.tmp")
    os.close(os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o666))  # mode from the umask
    try:
        yield tmp
        fd = os.open(tmp, os.O_RDONLY)
        try:
            os.fsync(fd)
        finally:
            os.close(fd)
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(OSError):
            os.remove(tmp)
        raise
    with contextlib.suppress(OSError):  # make the rename itself durable (not possible everywhere)
        fd = os.open(directory, os.O_RDONLY)
        try:
            os.fsync(fd)
        finally:
            os.close(fd)


@contextlib.contextmanager
def atomic_h5(path):
    """An h5py.File on a temp file beside `path` that replaces `path` only once complete."""
    with atomic_file(path) as tmp, h5py.File(tmp, "w") as f:
        yield f


_NUMERIC_KINDS = "biuf"
_BUILTIN_FILTERS = frozenset(
    {
        h5py.h5z.FILTER_DEFLATE,
        h5py.h5z.FILTER_SHUFFLE,
        h5py.h5z.FILTER_FLETCHER32,
        h5py.h5z.FILTER_SZIP,
        h5py.h5z.FILTER_NBIT,
        h5py.h5z.FILTER_SCALEOFFSET,
        h5py.h5z.FILTER_LZF,
    }
)


def _check_dataset(dataset: h5py.Dataset, path: str, where: str, error) -> None:
    if dataset.dtype.kind not in _NUMERIC_KINDS:
        raise error(
            f"{where}: dataset '{path}' has dtype {dataset.dtype}; only bool, integer and float arrays "
            "are read (object, string and opaque data are refused, never unpickled)"
        )
    if dataset.shape is None:
        raise error(f"{where}: dataset '{path}' has no dataspace")
    plist = dataset.id.get_create_plist()
    if dataset.is_virtual or plist.get_external_count():
        raise error(f"{where}: dataset '{path}' keeps its data in other files; refused")
    for i in range(plist.get_nfilters()):
        if plist.get_filter(i)[0] not in _BUILTIN_FILTERS:
            raise error(f"{where}: dataset '{path}' needs a filter plugin (id {plist.get_filter(i)[0]}); refused")


def hdf5_child(group: h5py.Group, name: str, where: str, path: str | None = None, error=ValueError):
    """`group[name]` (None if absent), reached only through a hard link: soft and external
    links are refused, never followed."""
    link = group.get(name, getlink=True)
    if link is None:
        return None
    if not isinstance(link, h5py.HardLink):
        raise error(f"{where}: '{path or name}' is a {type(link).__name__}; only plain groups and datasets are read")
    return group[name]


def hdf5_datasets(group: h5py.Group, where: str, error=ValueError) -> dict[str, h5py.Dataset]:
    """Every dataset under `group`, by path relative to it. Anything but a tree of plain
    groups and numeric datasets raises `error`."""
    found, stack, seen = {}, [("", group)], {group.id}
    while stack:
        prefix, current = stack.pop()
        for name in current:
            path = prefix + name
            item = hdf5_child(current, name, where, path, error)
            if isinstance(item, h5py.Group):
                if item.id in seen:
                    raise error(f"{where}: group '{path}' is linked twice; only a plain tree is read")
                seen.add(item.id)
                stack.append((path + "/", item))
            elif isinstance(item, h5py.Dataset):
                _check_dataset(item, path, where, error)
                found[path] = item
            else:
                raise error(f"{where}: '{path}' is a {type(item).__name__}; only groups and datasets are read")
    return found
