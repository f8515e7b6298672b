"""Saving and loading a large weights file: tapeflow (atomic write, CRC-32 of every array,
checked reads) against plain h5py writing and reading the same arrays.

    python bench/files.py [megabytes]     # default 500
"""

from __future__ import annotations

import os
import sys
import tempfile

import h5py
import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from _harness import compare, print_table  # noqa: E402

import tapeflow as tp  # noqa: E402


def _model(megabytes: float):
    width = 4096
    rows = max(1, int(megabytes * 2**20 / 4 / width / 2))
    model = tp.Sequential([tp.Input((rows,)), tp.layers.Dense(width, name="a"), tp.layers.Dense(rows, name="b")])
    model.set_weights([np.random.default_rng(0).standard_normal(w.shape).astype(np.float32) for w in model.weights])
    return model


def main() -> None:
    megabytes = float(sys.argv[1]) if len(sys.argv) > 1 else 500.0
    model = _model(megabytes)
    arrays = model.get_weights()
    size = sum(a.nbytes for a in arrays) / 2**20
    with tempfile.TemporaryDirectory() as tmp:
        ours_path, plain_path = os.path.join(tmp, "w.weights.h5"), os.path.join(tmp, "plain.h5")

        def plain_save():
            with h5py.File(plain_path, "w") as f:
                for i, a in enumerate(arrays):
                    f.create_dataset(str(i), data=a)

        def plain_load():
            with h5py.File(plain_path, "r") as f:
                return [f[str(i)][()] for i in range(len(arrays))]

        save = compare(lambda: model.save_weights(ours_path), plain_save, repeats=6, warmup=1)
        load = compare(lambda: model.load_weights(ours_path), plain_load, repeats=6, warmup=1)
    print_table([(f"save_weights {size:.0f} MB", *save), (f"load_weights {size:.0f} MB", *load)], "h5py")


if __name__ == "__main__":
    main()
