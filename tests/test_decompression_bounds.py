"""Small files that declare huge compressed datasets (decompression bombs) are refused by
every loader before a byte is inflated, and `tapeflow inspect` reads no state or constant
data at all, so a graph of any size is described in constant memory."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
import tracemalloc
import zlib

import h5py
import numpy as np
import pytest

import tapeflow as tp
from tapeflow import cli
from tapeflow.files.safe_h5 import CRC_ATTR, crc32, write_manifest

GIB_FLOATS = 1 << 28  # float32 values in 1 GiB
CHUNK = 1 << 20  # values per chunk (4 MiB)


def _zeros_crc(nbytes: int) -> int:
    block, crc = bytes(1 << 22), 0
    for _ in range(nbytes // len(block)):
        crc = zlib.crc32(block, crc)
    return zlib.crc32(bytes(nbytes % len(block)), crc)


def _gzip_zeros(group, name: str, count: int, chunk: int = CHUNK) -> None:
    """A gzip dataset of `count` float32 zeros, every chunk written (compressed once, stored
    as is), with the checksum tapeflow writes: a few kilobytes on disk per 4 MiB chunk."""
    ds = group.create_dataset(name, shape=(count,), dtype="<f4", chunks=(chunk,), compression="gzip")
    packed = zlib.compress(bytes(4 * chunk), 9)
    for start in range(0, count, chunk):
        ds.id.write_direct_chunk((start,), packed)
    ds.attrs[CRC_ATTR] = np.uint32(_zeros_crc(4 * count))


def _sparse_zeros(group, name: str, count: int) -> None:
    """A contiguous float32 dataset whose storage is allocated but never written: the file
    holds `4 * count` bytes yet takes no disk (a sparse file), and reads as zeros."""
    dcpl = h5py.h5p.create(h5py.h5p.DATASET_CREATE)
    dcpl.set_alloc_time(h5py.h5d.ALLOC_TIME_EARLY)
    dcpl.set_fill_time(h5py.h5d.FILL_TIME_NEVER)
    space = h5py.h5s.create_simple((count,))
    h5py.h5d.create(group.id, name.encode(), h5py.h5t.IEEE_F32LE, space, dcpl=dcpl)
    group[name].attrs[CRC_ATTR] = np.uint32(_zeros_crc(4 * count))


def _rewrite(src: str, dst: str, replace: dict, edit_json=None) -> None:
    """Copy the HDF5 file `src` to `dst`, entry by entry with its attributes, writing the
    datasets named in `replace` with their function instead ({path: fn(group, name)}), and
    the graph description through `edit_json`; then list the entries again."""
    with h5py.File(src, "r") as f, h5py.File(dst, "w") as out:

        def copy(name, item):
            if isinstance(item, h5py.Group):
                target = out.require_group(name)
            elif name == "manifest":
                return
            elif name in replace:
                parent, _, leaf = name.rpartition("/")
                replace[name](out.require_group(parent) if parent else out, leaf)
                return
            else:
                data = item[()]
                if name == "graph_json" and edit_json is not None:
                    text = json.dumps(edit_json(json.loads(bytes(data).decode())), separators=(",", ":"))
                    data = np.frombuffer(text.encode(), np.uint8)
                    target = out.create_dataset(name, data=data)
                    target.attrs[CRC_ATTR] = np.uint32(zlib.crc32(data.tobytes()))
                    return
                target = out.create_dataset(name, data=data)
            for key, value in item.attrs.items():
                target.attrs[key] = value

        for key, value in f.attrs.items():
            out.attrs[key] = value
        f.visititems(copy)
        write_manifest(out)


def _huge_state(meta: dict) -> dict:
    """The graph description with its one state tensor (and the value read from it) 1 GiB large."""
    for spec in [meta["state"][0], meta["nodes"][0]["outputs"][0]]:
        spec["shape"] = [GIB_FLOATS]
    return meta


@pytest.fixture(scope="module")
def graph_file(tmp_path_factory) -> str:
    v = tp.Variable(tp.zeros((4,)), name="v")
    path = str(tmp_path_factory.mktemp("graph") / "small.tfg")
    tp.freeze(lambda x: tp.sum(v) + x, tp.TensorSpec(())).save(path)
    return path


@pytest.fixture(scope="module")
def model_files(tmp_path_factory) -> dict:
    directory = tmp_path_factory.mktemp("model")
    model = tp.Sequential([tp.Input((3,)), tp.layers.Dense(2, name="d")], name="m")
    model.compile(optimizer="adam", loss="mse")
    model.fit(np.ones((2, 3), np.float32), np.ones((2, 2), np.float32), epochs=1, verbose=0)
    paths = {kind: str(directory / f"small.{kind}") for kind in ("keras", "weights.h5", "named.h5", "ckpt.h5")}
    model.save(paths["keras"])
    model.save_weights(paths["weights.h5"])
    tp.io.save_weights(model, paths["named.h5"])
    tp.io.save_checkpoint(paths["ckpt.h5"], model, model.optimizer, epoch=1)
    return {"model": model, "paths": paths}


def test_a_small_graph_file_holding_a_gzip_bomb_is_refused_naming_the_file_and_the_entry(graph_file, tmp_path):
    bomb = str(tmp_path / "bomb.tfg")
    _rewrite(graph_file, bomb, {"state/0": lambda g, n: _gzip_zeros(g, n, GIB_FLOATS)}, _huge_state)
    assert os.path.getsize(bomb) < 2 << 20
    with pytest.raises(ValueError, match=r"bomb\.tfg.*'state/0' would decompress to 1073741824 bytes"):
        tp.load_graph(bomb)
    assert cli.main(["inspect", bomb]) == 1


def test_a_gzip_bomb_is_refused_within_a_1_gib_address_space(graph_file, tmp_path):
    bomb = str(tmp_path / "bomb.tfg")
    _rewrite(graph_file, bomb, {"state/0": lambda g, n: _gzip_zeros(g, n, GIB_FLOATS)}, _huge_state)
    script = textwrap.dedent(
        f"""
        import resource, sys
        import tapeflow as tp
        from tapeflow import cli
        resource.setrlimit(resource.RLIMIT_AS, (1 << 30, 1 << 30))
        for load in (tp.load_graph, lambda p: cli.main(["inspect", p]) or 0):
            try:
                load({bomb!r})
            except ValueError as err:
                assert "bomb.tfg" in str(err), err
            else:
                assert load is not tp.load_graph, "loaded"
        print("refused")
        """
    )
    env = {**os.environ, "OMP_NUM_THREADS": "1", "OPENBLAS_NUM_THREADS": "1"}
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=600, env=env)
    assert done.returncode == 0 and done.stdout.strip() == "refused", done.stderr[-2000:]


def test_gzip_bombs_are_refused_in_every_file_kind(model_files, tmp_path):
    model, paths = model_files["model"], model_files["paths"]
    entries = {"keras": "weights/layers/dense/kernel", "weights.h5": "weights/layers/dense/kernel"}
    entries |= {"named.h5": "d/kernel", "ckpt.h5": "weights/d/kernel"}
    loaders = {
        "keras": tp.models.load_model,
        "weights.h5": model.load_weights,
        "named.h5": lambda p: tp.io.load_weights(model, p),
        "ckpt.h5": lambda p: tp.io.load_checkpoint(p, model, model.optimizer),
    }
    for kind, src in paths.items():
        bomb = str(tmp_path / f"bomb.{kind}")
        _rewrite(src, bomb, {entries[kind]: lambda g, n: _gzip_zeros(g, n, GIB_FLOATS)})
        with pytest.raises(ValueError, match=rf"bomb\.{kind}.*'{entries[kind]}' would decompress"):
            loaders[kind](bomb)


def test_many_small_bombs_together_are_bounded_by_the_file_size(model_files, tmp_path):
    src = model_files["paths"]["weights.h5"]

    def many(group, name):
        group = group.create_group(name)
        for i in range(48):
            _gzip_zeros(group, f"part{i}", 1 << 22)  # 16 MiB each, within the bound for one dataset

    bomb = str(tmp_path / "many.weights.h5")
    _rewrite(src, bomb, {"weights/layers/dense/kernel": many})
    with pytest.raises(
        ValueError, match=r"many\.weights\.h5.*compressed datasets would decompress to \d+ bytes in all"
    ):
        model_files["model"].load_weights(bomb)


def test_a_chunk_far_larger_than_its_dataset_is_refused(model_files, tmp_path):
    src = model_files["paths"]["weights.h5"]

    def wide_chunk(group, name):
        ds = group.create_dataset(
            name, shape=(3, 2), maxshape=(None, None), dtype="<f4", chunks=(1 << 12, 1 << 14), compression="gzip"
        )
        ds.id.write_direct_chunk((0, 0), zlib.compress(bytes(4 << 26), 9))
        ds.attrs[CRC_ATTR] = np.uint32(_zeros_crc(24))

    bomb = str(tmp_path / "chunk.weights.h5")
    _rewrite(src, bomb, {"weights/layers/dense/kernel": wide_chunk})
    with pytest.raises(ValueError, match=r"chunk\.weights\.h5.*'weights/layers/dense/kernel' would decompress"):
        model_files["model"].load_weights(bomb)


def test_compressed_datasets_of_modest_ratio_still_load(model_files, tmp_path):
    model, src = model_files["model"], model_files["paths"]["weights.h5"]
    kernel = model.get_weights()[0]

    def gz(group, name):
        group.create_dataset(name, data=kernel, chunks=kernel.shape, compression="gzip")
        group[name].attrs[CRC_ATTR] = np.uint32(crc32(kernel))

    path = str(tmp_path / "gz.weights.h5")
    _rewrite(src, path, {"weights/layers/dense/kernel": gz})
    model.load_weights(path)
    np.testing.assert_array_equal(model.get_weights()[0], kernel)


def test_inspect_reads_no_state_data(graph_file, tmp_path, capsys):
    huge = str(tmp_path / "huge.tfg")
    _rewrite(graph_file, huge, {"state/0": lambda g, n: _sparse_zeros(g, n, GIB_FLOATS)}, _huge_state)
    assert os.path.getsize(huge) > 1 << 30
    tracemalloc.start()
    try:
        status = cli.main(["inspect", huge])
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    out = capsys.readouterr().out
    assert status == 0, out
    assert f"parameters: {GIB_FLOATS} in 1 state tensors" in out and f"state v: float32[{GIB_FLOATS}]" in out
    assert peak < 64 << 20, peak
