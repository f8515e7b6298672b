"""Convolutional-network training benchmark: the OSDI 2016 paper's Table 1 models.

    .venv/bin/python bench/convnets.py                      # every model, batch 16, 3 rounds
    .venv/bin/python bench/convnets.py --models alexnet,vgg --rounds 5
    .venv/bin/python bench/convnets.py --quick              # batch 2, one round: a smoke test

One training step (forward, loss, backward, plain SGD update, float32) at ImageNet size of
the four networks of the paper's Table 1, after Soumith Chintala's convnet-benchmarks:

- AlexNet (the one-weird-trick widths 64-192-384-256-256), 224x224;
- Overfeat "fast" (96-256-512-1024-1024 convolutions, 3072-4096 dense), 231x231;
- OxfordNet / VGG-A (VGG-11), 224x224;
- GoogLeNet v1 (Inception v1), 224x224, without the local response normalisation of the
  paper and without batch normalisation, auxiliary heads or dropout.

No network has dropout, so that each system does the same arithmetic. tapeflow trains the
Keras-style model (`model.train_on_batch`, the step frozen into a graph) on NHWC images;
TensorFlow trains the very same definition with Keras 3 on its TensorFlow backend (Keras's
defaults: no XLA on a CPU), and PyTorch the same network as `nn.Module`s on NCHW images.

Each system runs in a process of its own, one process at a time; the reference systems'
processes never import tapeflow. TensorFlow runs in the bench environment `.venv-bench`
(`make bench-env`) and is left out where it is missing. The processes alternate over rounds.
Reported: the median step time over all rounds; for each peer, the median over rounds of the
per-round ratio tapeflow / peer; the ratio to the faster of TensorFlow and PyTorch; and the
FLOP floor: the convolutions' and dense layers' FLOPs per step (three times the forward's:
forward, input gradient, weight gradient) over this machine's measured sgemm peak, with each
system's multiple of it.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import time
from pathlib import Path

if str(Path(__file__).resolve().parent) not in sys.path:  # imported rather than run: after site-packages
    sys.path.append(str(Path(__file__).resolve().parent))
from _harness import THREADS, alternate, bench_python, pin_threads, round_ratio, run_json  # noqa: E402

pin_threads()

import numpy as np  # noqa: E402

# name: (image size, title)
MODELS = {
    "alexnet": (224, "AlexNet"),
    "overfeat": (231, "Overfeat (fast)"),
    "vgg": (224, "OxfordNet / VGG-A (VGG-11)"),
    "googlenet": (224, "GoogLeNet v1, LRN-free"),
}
CLASSES = 1000
LEARNING_RATE = 0.01
# GoogLeNet v1's inception modules: 1x1, 3x3 reduce, 3x3, 5x5 reduce, 5x5, pool projection.
INCEPTION = {
    "3a": (64, 96, 128, 16, 32, 32),
    "3b": (128, 128, 192, 32, 96, 64),
    "4a": (192, 96, 208, 16, 48, 64),
    "4b": (160, 112, 224, 24, 64, 64),
    "4c": (128, 128, 256, 24, 64, 64),
    "4d": (112, 144, 288, 32, 64, 64),
    "4e": (256, 160, 320, 32, 128, 128),
    "5a": (256, 160, 320, 32, 128, 128),
    "5b": (384, 192, 384, 48, 128, 128),
}
VGG_A = (64, "M", 128, "M", 256, 256, "M", 512, 512, "M", 512, 512, "M")


# ------------------------------------------------- Keras-style definitions
def keras_model(keras, name: str, image: int | None = None):
    """The network in a Keras-style API: `keras` is tapeflow itself or Keras 3 (NHWC images)."""
    layers = keras.layers
    image = image or MODELS[name][0]

    def conv(x, filters, kernel, stride=1, pad=0):
        if pad and (stride > 1 or pad != kernel // 2):
            x = layers.ZeroPadding2D(pad)(x)
        padding = "same" if pad and stride == 1 and pad == kernel // 2 else "valid"
        return layers.Conv2D(filters, kernel, strides=stride, padding=padding, activation="relu")(x)

    def classifier(x, widths):
        x = layers.Flatten()(x)
        for width in widths:
            x = layers.Dense(width, activation="relu")(x)
        return layers.Dense(CLASSES)(x)

    inputs = x = keras.Input((image, image, 3))
    if name == "alexnet":
        x = layers.MaxPooling2D(3, 2)(conv(x, 64, 11, 4, 2))
        x = layers.MaxPooling2D(3, 2)(conv(x, 192, 5, 1, 2))
        x = conv(conv(conv(x, 384, 3, 1, 1), 256, 3, 1, 1), 256, 3, 1, 1)
        x = classifier(layers.MaxPooling2D(3, 2)(x), (4096, 4096))
    elif name == "overfeat":
        x = layers.MaxPooling2D(2, 2)(conv(x, 96, 11, 4))
        x = layers.MaxPooling2D(2, 2)(conv(x, 256, 5))
        x = conv(conv(conv(x, 512, 3, 1, 1), 1024, 3, 1, 1), 1024, 3, 1, 1)
        x = classifier(layers.MaxPooling2D(2, 2)(x), (3072, 4096))
    elif name == "vgg":
        for width in VGG_A:
            x = layers.MaxPooling2D(2, 2)(x) if width == "M" else conv(x, width, 3, 1, 1)
        x = classifier(x, (4096, 4096))
    elif name == "googlenet":
        x = layers.MaxPooling2D(3, 2, padding="same")(conv(x, 64, 7, 2, 3))
        x = layers.MaxPooling2D(3, 2, padding="same")(conv(conv(x, 64, 1), 192, 3, 1, 1))
        for block, widths in INCEPTION.items():
            if block in ("4a", "5a"):
                x = layers.MaxPooling2D(3, 2, padding="same")(x)
            c1, c3r, c3, c5r, c5, pool = widths
            x = layers.Concatenate()(
                [
                    conv(x, c1, 1),
                    conv(conv(x, c3r, 1), c3, 3, 1, 1),
                    conv(conv(x, c5r, 1), c5, 5, 1, 2),
                    conv(layers.MaxPooling2D(3, 1, padding="same")(x), pool, 1),
                ]
            )
        x = layers.Dense(CLASSES)(layers.GlobalAveragePooling2D()(x))
    else:
        raise ValueError(f"unknown model {name!r}; expected one of {sorted(MODELS)}")
    return keras.Model(inputs, x)


# ---------------------------------------------------- PyTorch definitions
def final_size(name: str, image: int) -> int:
    """The side of the last feature map, which sizes the first dense layer (the GoogLeNet's is pooled to 1)."""
    if name == "alexnet":
        side = (image + 4 - 11) // 4 + 1
        for _ in range(3):
            side = (side - 3) // 2 + 1
        return side
    if name == "overfeat":
        return (((image - 11) // 4 + 1) // 2 - 4) // 2 // 2
    if name == "vgg":
        return image // 32
    return 1


def torch_model(name: str, image: int | None = None):
    """The same network as a PyTorch `nn.Module` (NCHW images)."""
    # lazily: the tapeflow and TensorFlow processes never load torch
    from torch import cat, nn

    image = image or MODELS[name][0]

    def conv(cin, cout, kernel, stride=1, pad=0):
        return [nn.Conv2d(cin, cout, kernel, stride, pad), nn.ReLU(inplace=True)]

    def classifier(features, widths):
        stack, width_in = [nn.Flatten()], features
        for width in widths:
            stack += [nn.Linear(width_in, width), nn.ReLU(inplace=True)]
            width_in = width
        return [*stack, nn.Linear(width_in, CLASSES)]

    side = final_size(name, image)
    if name == "alexnet":
        return nn.Sequential(
            *conv(3, 64, 11, 4, 2),
            nn.MaxPool2d(3, 2),
            *conv(64, 192, 5, 1, 2),
            nn.MaxPool2d(3, 2),
            *(conv(192, 384, 3, 1, 1) + conv(384, 256, 3, 1, 1) + conv(256, 256, 3, 1, 1)),
            nn.MaxPool2d(3, 2),
            *classifier(256 * side * side, (4096, 4096)),
        )
    if name == "overfeat":
        return nn.Sequential(
            *conv(3, 96, 11, 4),
            nn.MaxPool2d(2, 2),
            *conv(96, 256, 5),
            nn.MaxPool2d(2, 2),
            *(conv(256, 512, 3, 1, 1) + conv(512, 1024, 3, 1, 1) + conv(1024, 1024, 3, 1, 1)),
            nn.MaxPool2d(2, 2),
            *classifier(1024 * side * side, (3072, 4096)),
        )
    if name == "vgg":
        stack, cin = [], 3
        for width in VGG_A:
            if width == "M":
                stack.append(nn.MaxPool2d(2, 2))
            else:
                stack += conv(cin, width, 3, 1, 1)
                cin = width
        return nn.Sequential(*stack, *classifier(512 * side * side, (4096, 4096)))
    if name != "googlenet":
        raise ValueError(f"unknown model {name!r}; expected one of {sorted(MODELS)}")

    class Inception(nn.Module):
        def __init__(self, cin, c1, c3r, c3, c5r, c5, pool):
            super().__init__()
            self.b1 = nn.Sequential(*conv(cin, c1, 1))
            self.b3 = nn.Sequential(*(conv(cin, c3r, 1) + conv(c3r, c3, 3, 1, 1)))
            self.b5 = nn.Sequential(*(conv(cin, c5r, 1) + conv(c5r, c5, 5, 1, 2)))
            self.bp = nn.Sequential(nn.MaxPool2d(3, 1, 1), *conv(cin, pool, 1))
            self.width = c1 + c3 + c5 + pool

        def forward(self, x):
            return cat([self.b1(x), self.b3(x), self.b5(x), self.bp(x)], 1)

    stack = [*conv(3, 64, 7, 2, 3), nn.MaxPool2d(3, 2, 1), *conv(64, 64, 1), *conv(64, 192, 3, 1, 1)]
    stack.append(nn.MaxPool2d(3, 2, 1))
    cin = 192
    for block, widths in INCEPTION.items():
        if block in ("4a", "5a"):
            stack.append(nn.MaxPool2d(3, 2, 1))
        stack.append(Inception(cin, *widths))
        cin = stack[-1].width
    return nn.Sequential(*stack, nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(cin, CLASSES))


# ------------------------------------------------------------------ workers
def tapeflow_step(name: str, batch: int):
    # lazily: a worker process loads only the system it times
    import tapeflow as tp

    tp.set_num_threads(THREADS)
    tp.random.seed(0)
    model = keras_model(tp, name)
    model.compile(
        optimizer=tp.optimizers.SGD(LEARNING_RATE), loss=tp.losses.SparseCategoricalCrossentropy(from_logits=True)
    )
    x, y = _data(batch, MODELS[name][0], channels_last=True)
    return lambda: model.train_on_batch(x, y), f"tapeflow {tp.__version__}"


def tensorflow_step(name: str, batch: int):
    os.environ["KERAS_BACKEND"] = "tensorflow"
    os.environ["TF_CPP_MIN_LOG_LEVEL"] = "2"
    # lazily: a worker process loads only the system it times
    import keras
    import tensorflow as tf

    tf.config.threading.set_intra_op_parallelism_threads(THREADS)
    tf.config.threading.set_inter_op_parallelism_threads(THREADS)
    keras.utils.set_random_seed(0)
    model = keras_model(keras, name)
    model.compile(
        optimizer=keras.optimizers.SGD(LEARNING_RATE),
        loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True),
    )
    x, y = _data(batch, MODELS[name][0], channels_last=True)
    return lambda: model.train_on_batch(x, y), f"tensorflow {tf.__version__}, keras {keras.__version__}"


def pytorch_step(name: str, batch: int):
    # lazily: a worker process loads only the system it times
    import torch

    torch.set_num_threads(THREADS)
    torch.manual_seed(0)
    model = torch_model(name)
    optimizer = torch.optim.SGD(model.parameters(), LEARNING_RATE)
    x, y = (torch.from_numpy(a) for a in _data(batch, MODELS[name][0], channels_last=False))
    model.train()

    def step():
        optimizer.zero_grad(set_to_none=True)
        loss = torch.nn.functional.cross_entropy(model(x), y)
        loss.backward()
        optimizer.step()
        return loss.item()

    return step, f"torch {torch.__version__}"


STEPS = {"tapeflow": tapeflow_step, "pytorch": pytorch_step, "tensorflow": tensorflow_step}


def _data(batch: int, image: int, channels_last: bool):
    rng = np.random.default_rng(0)
    shape = (batch, image, image, 3) if channels_last else (batch, 3, image, image)
    return rng.standard_normal(shape, dtype=np.float32), rng.integers(0, CLASSES, batch).astype(np.int64)


def worker(system: str, name: str, batch: int, warmup: int, steps: int) -> None:
    """In a fresh process: time `steps` training steps of one system after `warmup` steps; print JSON."""
    step, version = STEPS[system](name, batch)
    for _ in range(warmup):
        step()
    seconds = []
    for _ in range(steps):
        start = time.perf_counter()
        step()
        seconds.append(time.perf_counter() - start)
    print(json.dumps({"seconds": seconds, "version": version}))


def probe(names: list[str]) -> None:
    """In a fresh process: this machine's float32 GEMM peak (the best of NumPy and PyTorch) and each
    model's forward FLOPs per image (convolutions and dense layers, 2 per multiply-add); print JSON."""
    # lazily: a worker process loads only the system it times
    import torch

    torch.set_num_threads(THREADS)
    peak = 0.0
    for n in (1024, 2048):
        a = np.ones((n, n), np.float32)
        peak = max(peak, _gemm_rate(np.matmul, a, n), _gemm_rate(torch.matmul, torch.from_numpy(a), n))
    flops = {}
    for name in names:
        model, total = torch_model(name), [0]

        def count(module, inputs, output, total=total):
            if isinstance(module, torch.nn.Conv2d):
                kh, kw = module.kernel_size
                total[0] += 2 * output.numel() * module.in_channels // module.groups * kh * kw
            elif isinstance(module, torch.nn.Linear):
                total[0] += 2 * output.numel() * module.in_features

        for module in model.modules():
            module.register_forward_hook(count)
        with torch.no_grad():
            model(torch.zeros(1, 3, MODELS[name][0], MODELS[name][0]))
        flops[name] = total[0]
    print(json.dumps({"peak": peak, "flops": flops}))


def _gemm_rate(matmul, a, n: int) -> float:
    """The best FLOP rate of matmul(a, a) over five calls after one."""
    matmul(a, a)
    best = float("inf")
    for _ in range(5):
        start = time.perf_counter()
        matmul(a, a)
        best = min(best, time.perf_counter() - start)
    return 2 * n**3 / best


# --------------------------------------------------------------------- main
def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--models", default=",".join(MODELS), help="comma-separated: " + ",".join(MODELS))
    parser.add_argument("--batch", type=int, default=16)
    parser.add_argument("--rounds", type=int, default=3, help="processes per system and model")
    parser.add_argument("--steps", type=int, default=3, help="timed steps per process (after 2 warm-up steps)")
    parser.add_argument("--quick", action="store_true", help="batch 2, one round, 2 timed steps: a smoke test")
    parser.add_argument("--worker", nargs=5, help=argparse.SUPPRESS)
    parser.add_argument("--probe", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.worker:
        system, name, *numbers = args.worker
        worker(system, name, *map(int, numbers))
        return
    if args.probe:
        probe(args.probe.split(","))
        return
    names = [name.strip() for name in args.models.split(",") if name.strip()]
    unknown = sorted(set(names) - set(MODELS))
    if unknown:
        parser.error(f"unknown models {unknown}; choose from {','.join(MODELS)}")
    if args.quick:
        args.batch, args.rounds, args.steps = 2, 1, 2
    warmup = 1 if args.quick else 2

    interpreters = {"tapeflow": sys.executable, "pytorch": sys.executable}
    if bench_python():
        interpreters["tensorflow"] = bench_python()
    else:
        print("TensorFlow left out: .venv-bench is missing (make bench-env builds it)")
    facts = run_json([sys.executable, __file__, "--probe", ",".join(names)])
    peak = facts["peak"]
    print(f"threads: {THREADS}; batch {args.batch}; {args.rounds} rounds of {args.steps} steps after {warmup} warm-up")
    print(f"sgemm peak on this machine: {peak / 1e9:.1f} GFLOP/s (best of NumPy and PyTorch, {THREADS} threads)")

    results = {}
    for name in names:
        commands = {
            system: [python, __file__, "--worker", system, name, str(args.batch), str(warmup), str(args.steps)]
            for system, python in interpreters.items()
        }
        results[name] = alternate(commands, args.rounds)
    versions = {system: reports[0]["version"] for system, reports in next(iter(results.values())).items()}
    print("; ".join(versions.values()))
    print_report(results, facts["flops"], peak, args.batch)


def print_report(results: dict, flops: dict, peak: float, batch: int) -> None:
    peers = [system for system in next(iter(results.values())) if system != "tapeflow"]
    systems = ["tapeflow", *peers]
    header = f"{'model':28s} " + " ".join(f"{s + ' ms':>13s}" for s in systems)
    header += " " + " ".join(f"{'tp/' + p:>13s}" for p in peers) + f" {'tp/best':>8s}"
    print(header)
    print("-" * len(header))
    floor_rows = []
    for name, reports in results.items():
        medians = {s: statistics.median([t for r in reports[s] for t in r["seconds"]]) for s in systems}
        rounds = {s: [statistics.median(r["seconds"]) for r in reports[s]] for s in systems}
        ratios = {p: round_ratio(rounds["tapeflow"], rounds[p]) for p in peers}
        best = min(peers, key=medians.get) if peers else None
        row = f"{MODELS[name][1]:28s} " + " ".join(f"{medians[s] * 1e3:13.1f}" for s in systems)
        row += " " + " ".join(f"{ratios[p]:12.2f}x" for p in peers)
        row += f" {ratios[best]:7.2f}x" if best else ""
        print(row)
        step_flops = 3 * flops[name] * batch
        floor_rows.append((name, step_flops, step_flops / peak, medians))
    print("ratios: the median over rounds of the per-round ratio; best: the peer with the lower median.")
    print("per-round medians (ms/step), to show the noise:")
    for name, reports in results.items():
        rounds = ("/".join(f"{statistics.median(r['seconds']) * 1e3:.0f}" for r in reports[s]) for s in systems)
        print(f"  {name}: " + "  ".join(f"{s} {text}" for s, text in zip(systems, rounds, strict=True)))
    print()
    header = f"{'model':28s} {'GFLOP/step':>10s} {'floor ms':>9s} " + " ".join(f"{s + ' x':>13s}" for s in systems)
    print(header)
    print("-" * len(header))
    for name, step_flops, floor, medians in floor_rows:
        print(
            f"{MODELS[name][1]:28s} {step_flops / 1e9:10.1f} {floor * 1e3:9.1f} "
            + " ".join(f"{medians[s] / floor:12.2f}x" for s in systems)
        )
    print("floor: 3x the forward's convolution and dense FLOPs over the sgemm peak; x: median step time / floor.")


if __name__ == "__main__":
    main()
