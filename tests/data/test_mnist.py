"""The IDX reader and the MNIST loader, against IDX files written here with `struct`."""

import gzip
import hashlib
import io
import os
import struct
import urllib.request
from pathlib import Path

import numpy as np
import pytest

from tapeflow.data.datasets import mnist

FASHION_DIR = Path("/usr/share/datasets/fashion-mnist")
_CODES = {
    np.dtype("u1"): 0x08,
    np.dtype("i1"): 0x09,
    np.dtype("i2"): 0x0B,
    np.dtype("i4"): 0x0C,
    np.dtype("f4"): 0x0D,
    np.dtype("f8"): 0x0E,
}


def idx_bytes(array: np.ndarray) -> bytes:
    """An IDX encoding written independently of the reader: struct header, big-endian data."""
    header = struct.pack(">BBBB", 0, 0, _CODES[array.dtype], array.ndim)
    header += struct.pack(f">{array.ndim}I", *array.shape)
    return header + array.astype(array.dtype.newbyteorder(">")).tobytes()


def write(path: Path, data: bytes, gz: bool = False) -> Path:
    path.write_bytes(gzip.compress(data) if gz else data)
    return path


def write_dataset(directory: Path, label: int = 0, n_train: int = 3, n_test: int = 2, gz: bool = True) -> Path:
    """Four tiny standard-named files; every label is `label`, so a test can tell sets apart."""
    directory.mkdir(parents=True, exist_ok=True)
    suffix = ".gz" if gz else ""
    for prefix, n in (("train", n_train), ("t10k", n_test)):
        images = np.arange(n * 28 * 28, dtype=np.int64).reshape(n, 28, 28).astype(np.uint8)
        labels = np.full(n, label, dtype=np.uint8)
        write(directory / f"{prefix}-images-idx3-ubyte{suffix}", idx_bytes(images), gz)
        write(directory / f"{prefix}-labels-idx1-ubyte{suffix}", idx_bytes(labels), gz)
    return directory


@pytest.fixture
def isolated(tmp_path, monkeypatch):
    """No $TAPEFLOW_DATA, a fresh home directory, and no system directories."""
    monkeypatch.delenv("TAPEFLOW_DATA", raising=False)
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    monkeypatch.setattr(mnist, "SYSTEM_DIRS", {})
    return tmp_path


def loaded_label(**kwargs) -> int:
    (_, y_train), _ = mnist.load_data(**kwargs)
    return int(y_train[0])


# ------------------------------------------------------------------ read_idx
@pytest.mark.parametrize("gz", [False, True], ids=["raw", "gz"])
@pytest.mark.parametrize("dtype", ["u1", "i1", "i2", "i4", "f4", "f8"])
def test_read_idx_round_trip(tmp_path, rng, gz, dtype):
    expected = rng.uniform(0, 100, size=(3, 4, 5)).astype(dtype)
    path = write(tmp_path / "x-idx3-ubyte", idx_bytes(expected), gz)  # gzip found by content
    got = mnist.read_idx(path)
    assert got.dtype == np.dtype(dtype) and got.dtype.isnative
    np.testing.assert_array_equal(got, expected)
    got[0, 0, 0] = 1  # a writable array, not a view of the file's bytes


def test_read_idx_scalar_and_empty(tmp_path):
    assert mnist.read_idx(write(tmp_path / "s", idx_bytes(np.array(7, np.uint8)))).tolist() == 7
    empty = mnist.read_idx(write(tmp_path / "e", idx_bytes(np.zeros((0, 28), np.uint8))))
    assert empty.shape == (0, 28)


GOOD = idx_bytes(np.arange(12, dtype=np.uint8).reshape(3, 4))


@pytest.mark.parametrize(
    "data, message",
    [
        (b"\x08\x03" + GOOD[2:], "bad magic number"),
        (GOOD[:2] + b"\x42" + GOOD[3:], "unknown dtype code 0x42"),
        (GOOD[:-1], "truncated"),
        (GOOD + b"\x00", "trailing bytes"),
        (GOOD[:3] + b"\x03" + GOOD[4:], "payload has"),  # header says 3 dims: wrong dims
        (GOOD[:6], "header declares 2 dims"),
        (b"\x00\x00", "too short"),
        (gzip.compress(GOOD)[:-6], "corrupt gzip"),
    ],
    ids=["magic", "dtype", "truncated", "trailing", "dims", "short-header", "tiny", "gzip"],
)
def test_read_idx_malformed_names_file(tmp_path, data, message):
    path = write(tmp_path / "broken-idx2-ubyte", data)
    with pytest.raises(ValueError, match=message) as info:
        mnist.read_idx(path)
    assert str(path) in str(info.value)


# ----------------------------------------------------------------- load_data
@pytest.mark.parametrize("gz", [False, True], ids=["raw", "gz"])
def test_load_data_types_and_shapes(isolated, gz):
    directory = write_dataset(isolated / "d", label=7, gz=gz)
    (x_train, y_train), (x_test, y_test) = mnist.load_data("mnist", path=directory)
    assert x_train.shape == (3, 28, 28) and x_test.shape == (2, 28, 28)
    assert x_train.dtype == np.uint8 and y_train.dtype == np.int64
    assert y_train.tolist() == [7, 7, 7] and y_test.tolist() == [7, 7]
    np.testing.assert_array_equal(x_train.ravel()[:300], np.arange(300) % 256)


def test_load_data_wrong_image_dims_names_file(isolated):
    directory = write_dataset(isolated / "d", gz=False)
    bad = directory / "train-images-idx3-ubyte"
    write(bad, idx_bytes(np.zeros((3, 27, 27), np.uint8)))
    with pytest.raises(ValueError, match=r"\[N, 28, 28\]") as info:
        mnist.load_data(path=directory)
    assert str(bad) in str(info.value)


def test_load_data_labels_checked(isolated):
    directory = write_dataset(isolated / "d", gz=False)
    labels = directory / "t10k-labels-idx1-ubyte"
    write(labels, idx_bytes(np.zeros((2, 1), np.uint8)))
    with pytest.raises(ValueError, match="labels of shape") as info:
        mnist.load_data(path=directory)
    assert str(labels) in str(info.value)
    write(labels, idx_bytes(np.array([3, 10], np.uint8)))
    with pytest.raises(ValueError, match=r"\[0, 9\]"):
        mnist.load_data(path=directory)
    write(labels, idx_bytes(np.array([3, 4, 5], np.uint8)))
    with pytest.raises(ValueError, match="2 images but .* 3 labels"):
        mnist.load_data(path=directory)


def test_load_data_bad_variant():
    with pytest.raises(ValueError, match="variant must be one of"):
        mnist.load_data("cifar")


# ---------------------------------------------------------------- search order
def test_explicit_path_is_the_only_place(isolated, monkeypatch):
    write_dataset(isolated / "env" / "mnist", label=1)
    monkeypatch.setenv("TAPEFLOW_DATA", str(isolated / "env"))
    assert loaded_label(path=write_dataset(isolated / "mine", label=2)) == 2
    assert loaded_label() == 1
    with pytest.raises(FileNotFoundError) as info:  # a wrong path is an error, not other data
        mnist.load_data(path=str(isolated / "typo"))
    message = str(info.value)
    assert str(isolated / "typo") in message and str(isolated / "env") not in message


def test_tapeflow_data_variant_subdirectory_then_root(isolated, monkeypatch):
    env = write_dataset(isolated / "env", label=3)
    monkeypatch.setenv("TAPEFLOW_DATA", str(env))
    assert loaded_label(variant="fashion") == 3
    write_dataset(env / "fashion", label=4)
    assert loaded_label(variant="fashion") == 4


def test_tapeflow_data_before_home_cache_before_system(isolated, monkeypatch):
    system = write_dataset(isolated / "system", label=5)
    monkeypatch.setattr(mnist, "SYSTEM_DIRS", {"fashion": (str(system),)})
    assert loaded_label(variant="fashion") == 5
    with pytest.raises(FileNotFoundError):  # system directories belong to their variant
        mnist.load_data("mnist")
    write_dataset(isolated / "home" / ".tapeflow" / "datasets" / "fashion", label=6)
    assert loaded_label(variant="fashion") == 6
    monkeypatch.setenv("TAPEFLOW_DATA", str(write_dataset(isolated / "env", label=8)))
    assert loaded_label(variant="fashion") == 8


def test_incomplete_directory_is_skipped(isolated, monkeypatch):
    env = write_dataset(isolated / "env", label=2)
    (write_dataset(env / "mnist", label=1) / "t10k-labels-idx1-ubyte.gz").unlink()
    monkeypatch.setenv("TAPEFLOW_DATA", str(env))
    assert loaded_label() == 2


def test_not_found_lists_every_place_and_remedy(isolated, monkeypatch):
    monkeypatch.setenv("TAPEFLOW_DATA", str(isolated / "env"))
    monkeypatch.setattr(mnist, "SYSTEM_DIRS", {"fashion": (str(isolated / "debian"),)})
    with pytest.raises(FileNotFoundError) as info:
        mnist.load_data("fashion")
    message = str(info.value)
    places = [
        isolated / "env" / "fashion",
        isolated / "env",
        isolated / "home" / ".tapeflow" / "datasets" / "fashion",
        isolated / "debian",
    ]
    positions = [message.index(f"  {place}\n") for place in places]
    assert positions == sorted(positions)
    for remedy in ("apt-get install dataset-fashion-mnist", "TAPEFLOW_DATA", "download=True"):
        assert remedy in message


# ------------------------------------------------------------------- download
@pytest.fixture
def mirror(isolated, monkeypatch):
    """A fake mirror serving tiny gzipped files whose sha256 the module is told."""
    served = {}
    staging = write_dataset(isolated / "staging", label=9)
    for key, stem in mnist.FILES.items():
        data = (staging / f"{stem}.gz").read_bytes()
        served[mnist.MIRRORS["mnist"] + stem + ".gz"] = data
        monkeypatch.setitem(mnist.SHA256["mnist"], key, hashlib.sha256(data).hexdigest())
    requested = []

    def urlopen(url, timeout=None):
        requested.append(url)
        return io.BytesIO(served[url])

    monkeypatch.setattr(urllib.request, "urlopen", urlopen)
    return served, requested


def test_no_download_unless_asked(mirror):
    _, requested = mirror
    with pytest.raises(FileNotFoundError):
        mnist.load_data("mnist")
    assert requested == []


def test_download_verifies_and_caches(isolated, mirror):
    _, requested = mirror
    (x_train, y_train), _ = mnist.load_data("mnist", download=True)
    assert x_train.shape == (3, 28, 28) and y_train.tolist() == [9, 9, 9]
    cache = isolated / "home" / ".tapeflow" / "datasets" / "mnist"
    assert sorted(os.listdir(cache)) == sorted(f"{stem}.gz" for stem in mnist.FILES.values())
    assert len(requested) == 4
    mnist.load_data("mnist", download=True)  # found in the cache now: nothing fetched
    assert len(requested) == 4


def test_download_into_explicit_path(isolated, mirror):
    target = isolated / "mine"
    mnist.load_data("mnist", path=target, download=True)
    assert len(os.listdir(target)) == 4
    assert not (isolated / "home" / ".tapeflow").exists()


def test_download_checksum_mismatch_leaves_nothing(isolated, mirror, monkeypatch):
    served, _ = mirror
    url = mnist.MIRRORS["mnist"] + "train-images-idx3-ubyte.gz"
    served[url] = b"tampered" + served[url]
    with pytest.raises(ValueError, match="checksum mismatch") as info:
        mnist.load_data("mnist", download=True)
    assert url in str(info.value)
    cache = isolated / "home" / ".tapeflow" / "datasets" / "mnist"
    assert "train-images-idx3-ubyte.gz" not in os.listdir(cache)
    assert not [name for name in os.listdir(cache) if name.endswith(".part")]


# ------------------------------------------------------------ the real files
@pytest.mark.skipif(not FASHION_DIR.is_dir(), reason="apt-get install dataset-fashion-mnist")
def test_real_fashion_mnist(monkeypatch):
    monkeypatch.delenv("TAPEFLOW_DATA", raising=False)
    (x_train, y_train), (x_test, y_test) = mnist.load_data("fashion", path=FASHION_DIR)
    assert x_train.shape == (60000, 28, 28) and x_test.shape == (10000, 28, 28)
    assert x_train.dtype == np.uint8 and y_train.dtype == np.int64
    assert y_train.shape == (60000,) and y_test.shape == (10000,)
    assert y_train.min() == 0 and y_train.max() == 9
    np.testing.assert_array_equal(np.bincount(y_test), np.full(10, 1000))  # balanced classes
