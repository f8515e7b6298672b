"""What recording a trace adds to `fit`: the tutorial's MLP (784-256-256-10, batch 128),
one epoch of 60 batches, with the profiler off and on, alternating.

    python bench/profiler.py
"""

from __future__ import annotations

from _harness import compare, pin_threads

pin_threads()

import numpy as np  # noqa: E402

import tapeflow as tp  # noqa: E402


def main() -> None:
    rng = np.random.default_rng(0)
    x = rng.normal(size=(60 * 128, 784)).astype(np.float32)
    y = rng.integers(0, 10, size=len(x)).astype(np.int64)
    model = tp.Sequential(
        [tp.layers.Input((784,)), tp.layers.Dense(256, activation="relu"), tp.layers.Dense(256, activation="relu")]
        + [tp.layers.Dense(10)]
    )
    model.compile(optimizer="adam", loss=tp.losses.SparseCategoricalCrossentropy(from_logits=True))

    def off():
        model.fit(x, y, batch_size=128, epochs=1, verbose=0)

    def on():
        with tp.profiler.trace():
            model.fit(x, y, batch_size=128, epochs=1, verbose=0)

    quiet, traced = compare(off, on, repeats=10, warmup=1)
    steps = len(x) // 128
    off_ms, on_ms = quiet / steps * 1e3, traced / steps * 1e3
    print(f"MLP fit step: off {off_ms:.3f} ms, on {on_ms:.3f} ms, on/off {traced / quiet:.3f}")


if __name__ == "__main__":
    main()
