"""HDF5 files read without trusting them, and the checksums written beside what they hold.

Every tapeflow loader reads through an `H5Reader`. It opens only regular files (a
directory or FIFO is refused before anything blocks on it) and checks each attribute's and
dataset's HDF5 type, shape and storage before reading a byte of its data. It reads
fixed-length strings, integers and numeric datasets only. Variable-length strings, which
sit in a global heap that HDF5 can loop on forever once damaged, are read only from the
files older tapeflows wrote, and only after every global heap in the file has been walked
and found sound. Files written now (see `write_attrs`, `write_array`, `write_text`) hold no
variable-length data, and a CRC-32 for every dataset and for each object's attributes, so a
loader refuses a damaged entry and names it. Problems raise `FileReadError` (a ValueError)
naming the file.

>>> import os, tempfile
>>> import numpy as np
>>> path = os.path.join(tempfile.mkdtemp(), "x.h5")
>>> with h5py.File(path, "w") as f:
...     write_attrs(f, {"format": "demo", "version": 1})
...     write_array(f, "a", np.arange(3.0))
...     write_manifest(f)
>>> with H5Reader(path, "demo") as r:
...     r.header({"demo": {1: True}}), r.array(r.datasets(r.file)["a"], checked=True).tolist()
(('demo', 1, True), [0.0, 1.0, 2.0])
"""

from __future__ import annotations

import concurrent.futures
import json
import math
import mmap
import os
import stat
import struct
import zlib

import h5py
import numpy as np

CRC_ATTR = "crc32"
MANIFEST = "manifest"  # the dataset listing every other dataset's path
_NUMERIC_KINDS = "biuf"
_TEXT_LIMIT = 1 << 28  # bytes of one string read from a file
# A compressed dataset may inflate to at most this many times its stored bytes, plus the
# slack (real weights compress far less; a chunk of zeros compresses about 1000 times).
_INFLATE_RATIO = 64
_INFLATE_SLACK = 1 << 24
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


class FileReadError(ValueError):
    """A file tapeflow will not read: not a regular file, damaged, truncated, holding data
    of a kind tapeflow never writes, or failing its checksum. `path` names the file."""

    def __init__(self, message: str, path: str | None = None):
        super().__init__(message)
        self.path = path


# ------------------------------------------------------------------ writing
def crc32(array: np.ndarray) -> int:
    """The CRC-32 of an array's little-endian bytes (what `write_array` stores)."""
    array = np.ascontiguousarray(array, dtype=array.dtype.newbyteorder("<"))
    return zlib.crc32(array.view(np.uint8).reshape(-1) if array.size else b"")


def _attrs_crc(values: dict) -> int:
    return zlib.crc32(json.dumps(sorted(values.items()), separators=(",", ":")).encode())


def write_attrs(obj, values: dict) -> None:
    """Set `obj`'s attributes: strings as fixed-length UTF-8, ints as int64 (uint64 at 2**63 and
    above), plus a CRC-32 over them all."""
    for name, value in values.items():
        if isinstance(value, str):
            obj.attrs[name] = np.bytes_(value.encode("utf-8"))
        elif isinstance(value, int | np.integer) and not isinstance(value, bool):
            obj.attrs[name] = np.uint64(value) if value >= 2**63 else np.int64(value)
        else:
            raise TypeError(f"write_attrs: attribute {name!r} must be a str or int, got {type(value).__name__}")
    obj.attrs[CRC_ATTR] = np.uint32(_attrs_crc({k: v if isinstance(v, str) else int(v) for k, v in values.items()}))


def write_array(group, name: str, array) -> None:
    """A contiguous dataset holding `array`, with its CRC-32."""
    array = np.asarray(array)
    group.create_dataset(name, data=array)
    group[name].attrs[CRC_ATTR] = np.uint32(crc32(array))


def write_text(group, name: str, text: str) -> None:
    """A scalar fixed-length string dataset holding `text` (UTF-8), with its CRC-32."""
    data = text.encode("utf-8")
    group.create_dataset(name, data=np.bytes_(data))
    group[name].attrs[CRC_ATTR] = np.uint32(zlib.crc32(data))


def write_manifest(f) -> None:
    """List every dataset of the file (last, once all are written), so that a reader can tell
    a renamed or lost entry from one the writer left out."""
    paths = []
    f.visititems(lambda name, item: paths.append(name) if isinstance(item, h5py.Dataset) else None)
    write_text(f, MANIFEST, json.dumps(sorted(paths)))


# ------------------------------------------------------------------ global heaps
_GCOL = struct.Struct("<4sB3xQ")
_OBJECT = struct.Struct("<HH4xQ")


def global_heaps_sound(source) -> bool:
    """Whether every global heap collection in a file (a path, an open descriptor, or its
    bytes) parses:
    objects that tile the collection exactly, none of size zero (HDF5 loops forever on one).

    >>> global_heaps_sound(b"GCOL" + bytes([1, 0, 0, 0]) + (4096).to_bytes(8, "little") + bytes(4080))
    False
    """
    if isinstance(source, int):  # an open file descriptor
        if os.fstat(source).st_size < _GCOL.size:
            return True
        with mmap.mmap(source, 0, access=mmap.ACCESS_READ) as data:
            return _heaps_sound(data)
    if not isinstance(source, str):
        return _heaps_sound(source)
    with open(source, "rb") as file:
        return global_heaps_sound(file.fileno())


def _heaps_sound(data) -> bool:
    start = data.find(b"GCOL")
    while start >= 0:
        if not _collection_sound(data, start):
            return False
        start = data.find(b"GCOL", start + 4)
    return True


def _collection_sound(data, start: int) -> bool:
    if start + _GCOL.size > len(data) or data[start + 4 : start + 8] != b"\x01\x00\x00\x00":
        return True  # these bytes are not a collection header (HDF5 refuses them if it reads them as one)
    size = _GCOL.unpack_from(data, start)[2]
    end = start + size
    if size < 4096 or end > len(data):
        return False
    p = start + _GCOL.size
    while p < end:
        if p + _OBJECT.size > end:
            return True  # a tail too small for an object is free space
        index, _refs, length = _OBJECT.unpack_from(data, p)
        step = length if index == 0 else _OBJECT.size + (length + 7) // 8 * 8
        if step < _OBJECT.size or step > end - p:
            return False
        p += step
    return True


# ------------------------------------------------------------------ reading
def check_regular_file(path: str, where: str, missing: type = FileNotFoundError, error: type = FileReadError) -> None:
    """Refuse a path that is not a regular file, without opening it (a FIFO would block).

    >>> check_regular_file("/", "demo")
    Traceback (most recent call last):
    ...
    tapeflow.files.safe_h5.FileReadError: demo: '/' is a directory, not a file
    """
    try:
        mode = os.stat(path).st_mode
    except FileNotFoundError:
        raise missing(f"{where}: no such file {path!r}") from None
    except OSError as err:
        raise error(f"{where}: cannot read {path!r}: {err.strerror}", path) from None
    if stat.S_ISDIR(mode):
        raise error(f"{where}: {path!r} is a directory, not a file", path)
    if not stat.S_ISREG(mode):
        raise error(f"{where}: {path!r} is not a regular file (a FIFO, socket or device)", path)


_OPEN_TRIES = 20  # renames over the path survived while opening it
_SIGNATURE = b"\x89HDF\r\n\x1a\n"


def _same_file(before: os.stat_result, now) -> bool:
    """Whether `now` (a path, or a stat result) is still the file `before` describes."""
    if not isinstance(now, os.stat_result):
        try:
            now = os.stat(now)
        except OSError:
            return False
    return (now.st_ino, now.st_dev) == (before.st_ino, before.st_dev)


def _from_h5py(err: BaseException) -> bool:
    tb = err.__traceback__
    while tb is not None and tb.tb_next is not None:
        tb = tb.tb_next
    return tb is not None and "h5py" in tb.tb_frame.f_code.co_filename


class H5Reader:
    """An HDF5 file opened for reading, with checked accessors for what tapeflow stores.

    A context manager: any error h5py raises inside (a damaged or truncated file) becomes
    `error` naming the file. `error` must be a subclass of FileReadError.
    """

    def __init__(self, path, where: str, error: type = FileReadError, missing: type = FileNotFoundError):
        self.error = error
        self.where = where
        self._heaps_checked = False
        self._walked: dict = {}  # (group, prefix) -> the datasets found under it
        self._inflated: dict = {}  # path -> bytes a compressed dataset decompresses to
        if hasattr(path, "read") or hasattr(path, "write"):
            self.path, self._size, self._object = f"<{type(path).__name__}>", _object_size(path), path
            opener = path
            try:
                self.file = h5py.File(opener, "r")
            except Exception as err:  # noqa: BLE001 - h5py raises OSError, ValueError, ... for damaged files
                raise self.fail(f"not a readable HDF5 file (damaged or truncated): {err}") from None
        else:
            self.path, self._object = os.fspath(path), None
            check_regular_file(self.path, where, missing, error)
            self._open_path(missing)

    def _open_path(self, missing: type) -> None:
        """Open the file at `self.path`, checking that every look at it (its size, its
        signature, the HDF5 open) saw the same file: a writer may rename a new file over the
        path at any moment, and the reader then reads the old file or the new one, whole.
        HDF5's own file locking is off: a writer's lock on a just-renamed file is not damage."""
        for _ in range(_OPEN_TRIES):
            try:
                before = os.stat(self.path)
            except FileNotFoundError:
                raise missing(f"{self.where}: no such file {self.path!r}") from None
            except OSError as err:
                raise self.fail(f"cannot read the file: {err.strerror}") from None
            self._size = before.st_size
            signed = self._is_hdf5()
            if not _same_file(before, self.path):
                continue
            if not signed:
                raise self.fail("not an HDF5 file (it does not start with the HDF5 signature)")
            try:
                file = h5py.File(self.path, "r", locking=False)
            except Exception as err:  # noqa: BLE001 - h5py raises OSError, ValueError, ... for damaged files
                if not _same_file(before, self.path):
                    continue
                raise self.fail(f"not a readable HDF5 file (damaged or truncated): {err}") from None
            if _same_file(before, os.fstat(file.id.get_vfd_handle())):
                self.file = file
                return
            file.close()
        raise self.fail(f"the file was replaced {_OPEN_TRIES} times while it was being opened")

    def _is_hdf5(self) -> bool:
        """Whether the HDF5 signature sits where HDF5 looks for it: at offset 0, 512, 1024, ..."""
        try:
            fd = os.open(self.path, os.O_RDONLY | getattr(os, "O_NONBLOCK", 0))  # never blocks on a FIFO
            with open(fd, "rb") as file:
                if not stat.S_ISREG(os.fstat(fd).st_mode):
                    return False
                offset = 0
                while offset + len(_SIGNATURE) <= self._size:
                    file.seek(offset)
                    if file.read(len(_SIGNATURE)) == _SIGNATURE:
                        return True
                    offset = 512 if offset == 0 else 2 * offset
        except OSError as err:
            raise self.fail(f"cannot read the file: {err}") from None
        return False

    def fail(self, message: str) -> FileReadError:
        """An `error` naming the file (and `where`)."""
        named = self.where if repr(self.path) in self.where else f"{self.where}: {self.path!r}"
        return self.error(f"{named}: {message}", self.path)

    def __enter__(self):
        return self

    def __exit__(self, kind, err, tb):
        try:
            self.file.close()
        except Exception:  # noqa: BLE001, S110 - a damaged file may not even close cleanly
            pass
        if err is None or isinstance(err, FileReadError):
            return False
        if isinstance(err, OSError | KeyError | RuntimeError | UnicodeDecodeError | RecursionError) or (
            isinstance(err, ValueError | TypeError | IndexError | OverflowError) and _from_h5py(err)
        ):
            raise self.fail(f"the HDF5 file is damaged or truncated: {type(err).__name__}: {err}") from None
        return False

    def header(self, formats: dict[str, dict[int, bool]], version_key: str = "version") -> tuple[str, int, bool]:
        """(format, version, whether the file holds checksums) of the root attributes, once the
        format is a key of `formats` and the version one it lists ({version: holds checksums})."""
        attrs = self.attrs(self.file, checked=False, legacy_text=True)
        fmt, version = attrs.get("format"), attrs.get(version_key)
        if fmt not in formats:
            raise self.fail(f"is not a {' or '.join(formats)} file (its 'format' attribute is {fmt!r:.80})")
        if not isinstance(version, int) or version not in formats[fmt]:
            newest = max(formats[fmt])
            newer = isinstance(version, int) and version > newest
            raise self.fail(
                f"{fmt} version {version!r:.40} "
                + ("was written by a newer tapeflow; " if newer else "is not a valid version; ")
                + f"this one reads versions {sorted(formats[fmt])}"
            )
        checked = formats[fmt][version]
        if checked:
            self.attrs(self.file, checked=True)
            self._check_manifest()
        return fmt, version, checked

    def _check_manifest(self) -> None:
        listed = self.json(self.file, MANIFEST, checked=True)
        numeric, texts = self._walk(self.file)
        self._walked[(self.file.name, "")] = numeric  # every group's datasets are found in this walk
        found = (set(numeric) | texts) - {MANIFEST}
        if not isinstance(listed, list) or found != set(listed):
            lost = sorted(set(listed) - found) if isinstance(listed, list) else []
            extra = sorted(found - set(listed)) if isinstance(listed, list) else []
            raise self.fail(f"the file's entries do not match its manifest: missing {lost}, not listed {extra}")

    # -------------------------------------------------------------- attributes
    def attrs(self, obj, checked: bool, legacy_text: bool = False) -> dict:
        """Every attribute of `obj` (except the checksum) as a str or int, each type checked
        before it is read; with `checked`, the attributes' CRC-32 must match. Variable-length
        strings only with `legacy_text` (files of older versions), after a heap check."""
        values = self._read_attrs(obj, legacy_text)
        stored = values.pop(CRC_ATTR, None)
        if checked:
            if stored is None:
                raise self.fail(f"the attributes of '{obj.name}' have no checksum")
            if stored != _attrs_crc(values):
                raise self.fail(f"the attributes of '{obj.name}' are corrupt (checksum mismatch): {values!r:.200}")
        return values

    def _read_attrs(self, obj, legacy_text: bool = False) -> dict:
        values = {}
        for name in list(obj.attrs):
            if not isinstance(name, str):
                raise self.fail(f"an attribute name of '{obj.name}' is not UTF-8 text: {name!r:.60}")
            attr = h5py.h5a.open(obj.id, name.encode("utf-8"))
            kind, space = attr.get_type(), attr.get_space()
            if space.get_simple_extent_type() != h5py.h5s.SCALAR:
                raise self.fail(f"attribute '{obj.name}' {name!r} must be a scalar")
            if isinstance(kind, h5py.h5t.TypeIntegerID) and kind.get_size() <= 8:
                values[name] = int(obj.attrs[name])
            elif isinstance(kind, h5py.h5t.TypeStringID):
                values[name] = self._text_attr(obj, name, kind, legacy_text)
            else:
                raise self.fail(f"attribute '{obj.name}' {name!r} has an HDF5 type tapeflow never writes")
        return values

    def _text_attr(self, obj, name: str, kind, legacy_text: bool) -> str:
        if kind.is_variable_str():
            if not legacy_text:
                raise self.fail(
                    f"attribute '{obj.name}' {name!r} is a variable-length string; "
                    "this version reads fixed-length strings only"
                )
            self._check_heaps()
            value = obj.attrs[name]
            if not isinstance(value, str) or len(value) > _TEXT_LIMIT:
                raise self.fail(f"attribute '{obj.name}' {name!r} is not valid text")
            return value
        if kind.get_size() > _TEXT_LIMIT:
            raise self.fail(f"attribute '{obj.name}' {name!r} is too long ({kind.get_size()} bytes)")
        return self._decode(bytes(obj.attrs[name]), f"attribute '{obj.name}' {name!r}")

    def _decode(self, data: bytes, what: str) -> str:
        try:
            return data.decode("utf-8")
        except UnicodeDecodeError:
            raise self.fail(f"{what} is not UTF-8 text") from None

    def _check_heaps(self) -> None:
        if not self._heaps_checked:
            source = self.file.id.get_vfd_handle() if self._object is None else self.path
            if self._object is not None:
                position = self._object.tell()
                self._object.seek(0)
                source = self._object.read()
                self._object.seek(position)
            if not global_heaps_sound(source):
                raise self.fail("a global heap (where variable-length strings live) is damaged")
            self._heaps_checked = True

    # -------------------------------------------------------------- tree
    def child(self, group, name: str, path: str | None = None):
        """`group[name]` (None if absent), reached only through a hard link: soft and
        external links are refused, never followed."""
        link = group.get(name, getlink=True)
        if link is None:
            return None
        if not isinstance(link, h5py.HardLink):
            raise self.fail(f"'{path or name}' is a {type(link).__name__}; only plain groups and datasets are read")
        return group[name]

    def group(self, parent, name: str, path: str | None = None, required: bool = True):
        """A subgroup (None if absent and not `required`)."""
        item = self.child(parent, name, path)
        if item is None and not required:
            return None
        if not isinstance(item, h5py.Group):
            raise self.fail(f"'{path or name}' must be a group")
        return item

    def datasets(self, group, prefix: str = "") -> dict[str, h5py.Dataset]:
        """Every numeric dataset under `group` by path relative to it, each checked (stored
        wholly in the file). Anything but a tree of plain groups, such datasets and scalar
        fixed-length strings (read only by `text`) is refused. A group is walked once."""
        key = (group.name, prefix)
        whole = self._walked.get((self.file.name, ""))
        if key not in self._walked and whole is not None and group.file == self.file:
            base = group.name.strip("/") + "/"
            self._walked[key] = {path[len(base) :]: ds for path, ds in whole.items() if path.startswith(base)}
        if key not in self._walked:
            self._walked[key] = self._walk(group, prefix)[0]
        return dict(self._walked[key])

    def _walk(self, group, prefix: str = "") -> tuple[dict[str, h5py.Dataset], set[str]]:
        found, texts, stack, seen = {}, set(), [("", group)], {group.id}
        while stack:
            base, current = stack.pop()
            for name in current:
                if not isinstance(name, str):
                    raise self.fail(f"a link name under '{prefix}{base}' is not UTF-8 text: {name!r:.60}")
                path = base + name
                item = self.child(current, name, prefix + path)
                if isinstance(item, h5py.Group):
                    if item.id in seen:
                        raise self.fail(f"group '{prefix}{path}' is linked twice; only a plain tree is read")
                    seen.add(item.id)
                    stack.append((path + "/", item))
                elif isinstance(item, h5py.Dataset) and _is_text(item):
                    texts.add(path)
                elif isinstance(item, h5py.Dataset):
                    self._check_dataset(item, prefix + path)
                    found[path] = item
                else:
                    raise self.fail(f"'{prefix}{path}' is a {type(item).__name__}; only groups and datasets are read")
        return found, texts

    def _check_dataset(self, ds: h5py.Dataset, path: str) -> None:
        kind = ds.id.get_type()
        if isinstance(kind, h5py.h5t.TypeStringID):
            raise self.fail(
                f"dataset '{path}' is a variable-length or non-scalar string; refused: only bool, integer and "
                "float arrays are read, and scalar fixed-length strings (nothing is unpickled)"
            )
        if not isinstance(kind, h5py.h5t.TypeIntegerID | h5py.h5t.TypeFloatID | h5py.h5t.TypeEnumID) or (
            ds.dtype.kind not in _NUMERIC_KINDS
        ):
            raise self.fail(
                f"dataset '{path}' has dtype {ds.dtype}; only bool, integer and float arrays are read "
                "(object, string and opaque data are refused, never unpickled)"
            )
        if ds.shape is None or ds.id.get_space().get_simple_extent_type() == h5py.h5s.NULL:
            raise self.fail(f"dataset '{path}' has no dataspace")
        plist = ds.id.get_create_plist()
        if ds.is_virtual or plist.get_external_count():
            raise self.fail(f"dataset '{path}' keeps its data in other files; refused")
        filters = [plist.get_filter(i)[0] for i in range(plist.get_nfilters())]
        for f in filters:
            if f not in _BUILTIN_FILTERS:
                raise self.fail(f"dataset '{path}' needs a filter plugin (id {f}); refused")
        size = math.prod(ds.shape)
        nbytes = size * ds.dtype.itemsize
        stored = ds.id.get_storage_size()
        if self._size is not None and stored > self._size:
            raise self.fail(f"dataset '{path}' claims {stored} stored bytes, more than the file's {self._size}")
        if filters:
            chunks = math.prod(-(-n // c) for n, c in zip(ds.shape, ds.chunks, strict=True))
            if size and ds.id.get_num_chunks() < chunks:
                raise self.fail(f"dataset '{path}' has chunks that were never written")
            self._check_inflation(path, max(nbytes, math.prod(ds.chunks) * ds.dtype.itemsize), stored)
        elif size and (stored < nbytes or (self._size is not None and nbytes > self._size)):
            raise self.fail(f"dataset '{path}' holds less data than its shape {ds.shape} needs (unwritten or cut off)")

    def _check_inflation(self, path: str, nbytes: int, stored: int) -> None:
        """Refuse a compressed (filtered) dataset that would inflate past `_INFLATE_RATIO` times
        its stored bytes (plus `_INFLATE_SLACK`), or make the file's compressed datasets
        together inflate past that bound on the whole file's size: a small file never
        decompresses into gigabytes. tapeflow itself writes no compressed datasets."""
        if nbytes > _INFLATE_RATIO * stored + _INFLATE_SLACK:
            raise self.fail(
                f"dataset '{path}' would decompress to {nbytes} bytes from {stored} stored bytes "
                f"(over {_INFLATE_RATIO} times); refused"
            )
        self._inflated[path] = nbytes
        total = sum(self._inflated.values())
        if self._size is not None and total > _INFLATE_RATIO * self._size + _INFLATE_SLACK:
            raise self.fail(
                f"its compressed datasets would decompress to {total} bytes in all (at '{path}'), over "
                f"{_INFLATE_RATIO} times the file's {self._size} bytes; refused"
            )

    # -------------------------------------------------------------- data
    def array(self, ds: h5py.Dataset, checked: bool, dtype: np.dtype | None = None) -> np.ndarray:
        """The data of a dataset `datasets` returned; with `checked`, its CRC-32 must match.
        With `dtype`, cast to it, refusing values the cast would change beyond rounding
        (overflow to inf, out-of-range or fractional integers). Errors name the dataset by
        its path in the file."""
        path = ds.name.lstrip("/")
        if checked:
            array, crc = _read_with_crc(ds)
            self._verify(ds, crc, f"dataset '{path}'")
        else:
            array = np.asarray(ds[()])
        return array if dtype is None else self.cast(array, np.dtype(dtype), f"dataset '{path}'")

    def _verify(self, ds: h5py.Dataset, crc: int, what: str) -> None:
        stored = self._read_attrs(ds).get(CRC_ATTR)
        if stored is None:
            raise self.fail(f"{what} has no checksum")
        if stored != crc:
            raise self.fail(f"{what} is corrupt (checksum mismatch)")

    def cast(self, array: np.ndarray, dtype: np.dtype, what: str) -> np.ndarray:
        if array.dtype == dtype:
            return array
        with np.errstate(all="ignore"):
            out = array.astype(dtype)
            if dtype.kind == "f":
                bad = np.isfinite(array) & ~np.isfinite(out) if array.dtype.kind == "f" else ~np.isfinite(out)
            else:
                bad = out.astype(array.dtype) != array
        if bad.any():
            value = array[bad].reshape(-1)[0].item()
            raise self.fail(f"{what}: value {value!r} does not fit {dtype} (stored as {array.dtype})")
        return out

    def text(self, group, name: str, checked: bool, required: bool = True) -> str | None:
        """A scalar fixed-length string dataset as text; with `checked`, its CRC-32 must match."""
        item = self.child(group, name)
        if item is None:
            if required:
                raise self.fail(f"'{name}' is missing")
            return None
        kind = item.id.get_type() if isinstance(item, h5py.Dataset) else None
        if (
            not isinstance(kind, h5py.h5t.TypeStringID)
            or kind.is_variable_str()
            or item.shape != ()
            or kind.get_size() > _TEXT_LIMIT
        ):
            raise self.fail(f"'{name}' must be a scalar fixed-length string dataset")
        plist = item.id.get_create_plist()
        if item.is_virtual or plist.get_external_count() or plist.get_nfilters():
            raise self.fail(f"dataset '{name}' must be stored plainly in the file")
        if item.id.get_storage_size() < kind.get_size():
            raise self.fail(f"dataset '{name}' holds less data than it declares")
        data = bytes(item[()])
        if checked:
            self._verify(item, zlib.crc32(data), f"dataset '{name}'")
        return self._decode(data, f"dataset '{name}'")

    def json(self, group, name: str, checked: bool, required: bool = True):
        """The JSON value of a `text` dataset (None if absent and not `required`)."""
        text = self.text(group, name, checked, required)
        if text is None:
            return None
        return self.parse_json(text, f"'{name}'")

    def parse_json(self, text: str, what: str):
        if not isinstance(text, str):
            raise self.fail(f"{what} must be JSON text, got {type(text).__name__}")
        try:
            return json.loads(text, parse_constant=_reject_constant, object_pairs_hook=unique_object)
        except (ValueError, RecursionError) as err:
            raise self.fail(f"{what} is not valid JSON: {err}") from None


_OVERLAP_BYTES = 1 << 26  # datasets this large are read in blocks, each checksummed while the next is read


def _read_with_crc(ds: h5py.Dataset) -> tuple[np.ndarray, int]:
    """A dataset's data and the CRC-32 of its little-endian bytes. A large one is read in
    blocks of rows, each block's CRC computed on a thread (zlib releases the GIL) while
    the next block is read, so the checksum costs little time beyond the read."""
    row_bytes = ds.dtype.itemsize * int(np.prod(ds.shape[1:], dtype=np.int64)) if ds.ndim else 0
    if ds.size * ds.dtype.itemsize < 2 * _OVERLAP_BYTES or not row_bytes or ds.dtype.byteorder == ">":
        array = np.asarray(ds[()])
        return array, crc32(array)
    out = np.empty(ds.shape, ds.dtype)
    step = max(1, _OVERLAP_BYTES // row_bytes)
    with concurrent.futures.ThreadPoolExecutor(1) as pool:
        pending = pool.submit(int, 0)
        for start in range(0, ds.shape[0], step):
            rows = np.s_[start : start + step]
            ds.read_direct(out, rows, rows)
            block = out[rows].reshape(-1).view(np.uint8)
            pending = pool.submit(lambda previous, data: zlib.crc32(data, previous.result()), pending, block)
        return out, pending.result()


def _object_size(file) -> int | None:
    """The size of a seekable binary file object (None if it cannot tell)."""
    try:
        position = file.tell()
        size = file.seek(0, os.SEEK_END)
        file.seek(position)
    except (OSError, ValueError, AttributeError):
        return None
    return size if isinstance(size, int) else None


def _is_text(ds: h5py.Dataset) -> bool:
    """Whether a dataset is a scalar fixed-length string (what `write_text` writes)."""
    kind = ds.id.get_type()
    return isinstance(kind, h5py.h5t.TypeStringID) and not kind.is_variable_str() and ds.shape == ()


def unique_object(pairs: list) -> dict:
    """A JSON object's pairs as a dict, refusing a key given twice (which value was meant
    is ambiguous); pass as `json.loads`'s `object_pairs_hook`.

    >>> json.loads('{"units": 2, "units": 3}', object_pairs_hook=unique_object)
    Traceback (most recent call last):
    ...
    ValueError: key 'units' appears twice in one object
    """
    out = dict(pairs)
    if len(out) != len(pairs):
        seen: set = set()
        twice = next(key for key, _ in pairs if key in seen or seen.add(key))
        raise ValueError(f"key {twice!r:.80} appears twice in one object")
    return out


def _reject_constant(name: str):
    raise ValueError(f"{name} is not JSON")
