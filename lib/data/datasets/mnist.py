"""MNIST and Fashion-MNIST from IDX files: found locally, downloaded only on request.

`load_data(path=...)` reads the four files (each gzipped or not) from that directory
and nowhere else, so a mistyped path is an error rather than other data. Without
`path` it uses the first of these places that holds all four:

1. `$TAPEFLOW_DATA/<variant>`, then `$TAPEFLOW_DATA`;
2. `~/.tapeflow/datasets/<variant>` (where `download=True` puts them);
3. for "fashion", Debian's `/usr/share/datasets/fashion-mnist`
   (`apt-get install dataset-fashion-mnist`).

Example (needs the data files, so not a doctest)::

    from tapeflow.data.datasets import mnist
    (x_train, y_train), (x_test, y_test) = mnist.load_data("fashion")
    x_train.shape, x_train.dtype, y_train.dtype  # (60000, 28, 28) uint8 int64
"""

from __future__ import annotations

import gzip
import io
import math
import os
import zlib
from pathlib import Path

import numpy as np

from tapeflow.data.datasets._download import fetch, sha256_of
from tapeflow.files.safe_h5 import FileReadError, check_regular_file

VARIANTS = ("mnist", "fashion")

# (split, kind) -> standard file stem; the same names for both variants.
FILES = {
    ("train", "images"): "train-images-idx3-ubyte",
    ("train", "labels"): "train-labels-idx1-ubyte",
    ("test", "images"): "t10k-images-idx3-ubyte",
    ("test", "labels"): "t10k-labels-idx1-ubyte",
}

MIRRORS = {
    "mnist": "https://storage.googleapis.com/cvdf-datasets/mnist/",
    "fashion": "http://fashion-mnist.s3-website.eu-central-1.amazonaws.com/",
}

# sha256 of the gzipped files as MIRRORS serve them (the values tensorflow_datasets lists).
SHA256 = {
    "mnist": {
        ("train", "images"): "440fcabf73cc546fa21475e81ea370265605f56be210a4024d2ca8f203523609",
        ("train", "labels"): "3552534a0a558bbed6aed32b30c495cca23d567ec52cac8be1a0730e8010255c",
        ("test", "images"): "8d422c7b0a1c1c79245a5bcf07fe86e33eeafee792b84584aec276f5a2dbc4e6",
        ("test", "labels"): "f7ae60f92e00ec6debd23a6088c31dbd2371eca3ffa0defaefb259924204aec6",
    },
    "fashion": {
        ("train", "images"): "3aede38d61863908ad78613f6a32ed271626dd12800ba2636569512369268a84",
        ("train", "labels"): "a04f17134ac03560a47e3764e11b92fc97de4d1bfaf8ba1a3aa29af54cc90845",
        ("test", "images"): "346e55b948d973a97e58d2351dde16a484bd415d4595297633bb08f03db6a073",
        ("test", "labels"): "67da17c76eaffca5446c3361aaab5c3cd6d1c2608764d35dfb1850b086bf8dd5",
    },
}

# Directories that OS packages install into, searched last.
SYSTEM_DIRS = {"fashion": ("/usr/share/datasets/fashion-mnist",)}

# IDX type code (third magic byte) -> big-endian element type.
_IDX_DTYPES = {
    0x08: np.dtype("u1"),
    0x09: np.dtype("i1"),
    0x0B: np.dtype(">i2"),
    0x0C: np.dtype(">i4"),
    0x0D: np.dtype(">f4"),
    0x0E: np.dtype(">f8"),
}
_GZIP_MAGIC = b"\x1f\x8b"
_MAX_IDX_BYTES = 1 << 34  # 16 GiB: far above any IDX data set


def read_idx(path: str | os.PathLike) -> np.ndarray:
    """The array stored in one IDX file (gzipped or not), in native byte order.

    Raises ValueError, naming the file, if the header or payload is malformed.

    >>> import os, tempfile
    >>> import numpy as np
    >>> from tapeflow.data.datasets import mnist
    >>> path = os.path.join(tempfile.mkdtemp(), "tiny-idx1-ubyte")
    >>> with open(path, "wb") as f:
    ...     _ = f.write(bytes([0, 0, 0x08, 1, 0, 0, 0, 3, 7, 8, 9]))
    >>> mnist.read_idx(path).tolist()
    [7, 8, 9]
    """
    path = os.fspath(path)
    check_regular_file(path, "read_idx")  # a FIFO would block, a directory is no file
    with open(path, "rb") as f:
        data = f.read()
    if data[:2] == _GZIP_MAGIC:
        data = _gunzip_idx(data, path)
    return _parse_idx(data, path)


def _gunzip_idx(data: bytes, path: str) -> bytes:
    """The decompressed IDX bytes, read no further than the header says (no gzip bomb)."""
    try:
        with gzip.GzipFile(fileobj=io.BytesIO(data)) as stream:
            head = stream.read(4)
            head += stream.read(4 * head[3]) if len(head) == 4 else b""
            if len(head) < 4 or len(head) < 4 + 4 * head[3] or head[2] not in _IDX_DTYPES:
                return head  # _parse_idx names what is wrong
            dims = np.frombuffer(head, dtype=">u4", count=head[3], offset=4)
            expected = math.prod(int(d) for d in dims) * _IDX_DTYPES[head[2]].itemsize
            if expected > _MAX_IDX_BYTES:
                raise FileReadError(f"read_idx: {path}: dims {tuple(map(int, dims))} need {expected} bytes; too large")
            return head + stream.read(expected + 1)
    except (OSError, EOFError, zlib.error) as err:
        raise FileReadError(f"read_idx: {path}: corrupt gzip stream ({err})", path) from None


def _parse_idx(data: bytes, path: str) -> np.ndarray:
    if len(data) < 4:
        raise FileReadError(f"read_idx: {path}: {len(data)} bytes is too short for an IDX header", path)
    if data[0] != 0 or data[1] != 0:
        raise FileReadError(
            f"read_idx: {path}: bad magic number 0x{data[:4].hex()}; an IDX file starts with two "
            "zero bytes (is it an IDX file?)",
            path,
        )
    dtype = _IDX_DTYPES.get(data[2])
    if dtype is None:
        known = ", ".join(f"0x{code:02X}" for code in _IDX_DTYPES)
        raise FileReadError(f"read_idx: {path}: unknown dtype code 0x{data[2]:02X} (known: {known})", path)
    ndim = data[3]
    header = 4 + 4 * ndim
    if len(data) < header:
        raise FileReadError(
            f"read_idx: {path}: header declares {ndim} dims but the file ends at byte {len(data)}", path
        )
    shape = tuple(int(d) for d in np.frombuffer(data, dtype=">u4", count=ndim, offset=4))
    expected = math.prod(shape) * dtype.itemsize
    payload = len(data) - header
    if payload != expected:
        raise FileReadError(
            f"read_idx: {path}: payload has {payload} bytes but dims {shape} of {dtype.name} "
            f"need {expected} ({'truncated' if payload < expected else 'trailing bytes'})",
            path,
        )
    array = np.frombuffer(data, dtype=dtype, offset=header).reshape(shape)
    return array.astype(dtype.newbyteorder("="))  # a writable copy, native byte order


def load_data(
    variant: str = "mnist", path: str | os.PathLike | None = None, download: bool = False
) -> tuple[tuple[np.ndarray, np.ndarray], tuple[np.ndarray, np.ndarray]]:
    """(x_train, y_train), (x_test, y_test): uint8 images [N, 28, 28] and int64 labels.

    `variant` is "mnist" or "fashion". The files are read from `path`, or else
    searched for as the module docstring lists. If they are not found and
    `download=True`, they are fetched from the public mirror into `path` (default
    ~/.tapeflow/datasets/<variant>) and checked against their sha256.

    Example (needs the data files)::

        (x, y), _ = load_data("fashion")
        x = x.reshape(-1, 784).astype("float32") / 255
    """
    if variant not in VARIANTS:
        raise ValueError(f"load_data: variant must be one of {VARIANTS}, got {variant!r}")
    places = _search_dirs(variant, path)
    found = None
    for place in places:
        found = _files_in(place)
        if found is not None:
            break
    if found is None and download:
        found = _download(variant, places[0] if path is not None else _cache_dir(variant))
    if found is None:
        raise FileNotFoundError(_not_found_message(variant, places, path is not None))
    splits = []
    for split in ("train", "test"):
        images = _checked_images(read_idx(found[split, "images"]), found[split, "images"])
        labels = _checked_labels(read_idx(found[split, "labels"]), found[split, "labels"])
        if len(images) != len(labels):
            raise ValueError(
                f"load_data: {found[split, 'images']} has {len(images)} images but "
                f"{found[split, 'labels']} has {len(labels)} labels"
            )
        splits.append((images, labels))
    return splits[0], splits[1]


def _checked_images(images: np.ndarray, path: Path) -> np.ndarray:
    if images.dtype != np.uint8 or images.ndim != 3 or images.shape[1:] != (28, 28):
        raise ValueError(
            f"load_data: {path}: expected uint8 images of shape [N, 28, 28], got {images.dtype} {images.shape}"
        )
    return images


def _checked_labels(labels: np.ndarray, path: Path) -> np.ndarray:
    if labels.dtype != np.uint8 or labels.ndim != 1:
        raise ValueError(f"load_data: {path}: expected uint8 labels of shape [N], got {labels.dtype} {labels.shape}")
    if labels.size and labels.max() > 9:
        raise ValueError(f"load_data: {path}: labels must lie in [0, 9], found {labels.max()}")
    return labels.astype(np.int64)


def _cache_dir(variant: str) -> Path:
    return Path.home() / ".tapeflow" / "datasets" / variant


def _search_dirs(variant: str, path) -> list[Path]:
    if path is not None:
        return [Path(path).expanduser()]
    places = []
    root = os.environ.get("TAPEFLOW_DATA")
    if root:
        places += [Path(root).expanduser() / variant, Path(root).expanduser()]
    places.append(_cache_dir(variant))
    places += [Path(p) for p in SYSTEM_DIRS.get(variant, ())]
    return places


def _files_in(directory: Path) -> dict | None:
    """The four files in `directory` (raw preferred over .gz), or None if any is missing."""
    found = {}
    for key, stem in FILES.items():
        for name in (stem, stem + ".gz"):
            if (directory / name).is_file():
                found[key] = directory / name
                break
        else:
            return None
    return found


def _not_found_message(variant: str, places: list[Path], explicit: bool) -> str:
    looked = "\n".join(f"  {place}" for place in places)
    names = ", ".join(f"{stem}[.gz]" for stem in FILES.values())
    fetch = f"call load_data({variant!r}, download=True) to fetch them from {MIRRORS[variant]}"
    if explicit:
        how = ["copy them into that directory", "leave path unset to search the usual places", fetch]
    else:
        how = [
            f"set TAPEFLOW_DATA to a directory holding them (or its '{variant}' subdirectory)",
            "pass path= (a directory holding them) to load_data",
            fetch,
        ]
        if variant == "fashion":
            how.insert(0, "apt-get install dataset-fashion-mnist (Debian/Ubuntu)")
    return (
        f"load_data: no {variant} IDX files ({names}) found. Looked in:\n{looked}\n"
        "To get them: " + "; or ".join(how) + "."
    )


def _download(variant: str, directory: Path) -> dict:
    """Fetch the four gzipped files into `directory`, verifying each sha256."""
    directory.mkdir(parents=True, exist_ok=True)
    for key, stem in FILES.items():
        name = stem + ".gz"
        target = directory / name
        expected = SHA256[variant][key]
        if target.is_file() and sha256_of(target) == expected:
            continue
        fetch(MIRRORS[variant] + name, target, expected, "load_data")
    return _files_in(directory)
