"""The process that loads structure-mutated files for tests/test_structure_fuzz.py.

It imports tapeflow, limits its own address space (``--memory`` bytes, RLIMIT_AS), writes
{"ready": true}, then answers one JSON request per line on stdin with JSON lines on stdout:

- {"make": directory}: write the original files there; answers {name: {"kind": k, "path": p}};
- {"original": name, "path": p, "source": original path, "kind": k, "seed": s}: first write a
  mutant of the original there (`test_structure_fuzz.make_mutant`) and answer
  {"description": d, "refuse": r}; then, as for a request without "source":
- {"original": name, "path": p}: load p as the file `name` is, then run what it holds
  (predict, or the graph) on fixed inputs. Once loaded it writes {"stage": "run"}; then
  it answers {"outcome": o, "detail": d}: o is "loaded" (d, the digest of the weights and
  results), "refused" (a ValueError or TypeError naming the file, at load), "run_error"
  (a ValueError or TypeError while running what loaded), "oom" (MemoryError) or "raw"
  (any other failure, or an error that does not name the file).
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import random
import resource
import sys
import warnings

import numpy as np
import test_structure_fuzz

import tapeflow as tp

_TOKENS = np.arange(32).reshape(4, 8) % 20
_IMAGES = np.linspace(-1.0, 1.0, 2 * 8 * 8 * 1, dtype=np.float32).reshape(2, 8, 8, 1)
_GRAPH_X = (np.arange(6, dtype=np.float32).reshape(2, 3) - 2.5) / 3.0
_GRAPH_K = np.linspace(-2.0, 2.0, 12, dtype=np.float32).reshape(3, 4)


# ------------------------------------------------------------------ the originals
def text_model():
    """Embedding, convolution, normalization, recurrence, attention, pooling, dropout, dense."""
    inp = tp.Input((8,), dtype="int32", name="tokens")
    x = tp.layers.Embedding(20, 6, name="embed")(inp)
    x = tp.layers.Conv1D(5, 3, padding="same", activation="relu", name="conv")(x)
    x = tp.layers.BatchNormalization(name="bn")(x)
    x = tp.layers.LSTM(4, return_sequences=True, name="lstm")(x)
    x = tp.layers.MultiHeadAttention(2, 3, name="mha")(x, x)
    x = tp.layers.LayerNormalization(name="ln")(x)
    x = tp.layers.GlobalAveragePooling1D(name="gap")(x)
    x = tp.layers.Dropout(0.2, seed=3, name="drop")(x)
    out = tp.layers.Dense(3, activation="softmax", name="head")(x)
    return tp.Model(inp, out, name="text")


def image_model():
    return tp.Sequential(
        [
            tp.Input((8, 8, 1)),
            tp.layers.Conv2D(4, 3, strides=1, padding="valid", activation="relu", name="c1"),
            tp.layers.MaxPooling2D(2, name="p1"),
            tp.layers.Conv2D(3, 2, padding="same", use_bias=False, name="c2"),
            tp.layers.Flatten(name="flat"),
            tp.layers.Dense(5, activation="tanh", name="d1"),
            tp.layers.Dense(2, name="d2"),
        ],
        name="image",
    )


def _compiled(build):
    model = build()
    model.compile(optimizer=tp.optimizers.Adam(1e-2), loss="mse")
    return model


def _ops_graph():
    """A graph of many ops: elementwise, reductions, indexing, sorting, loops, branches, convolution, pooling."""
    w = tp.Variable(tp.constant(np.arange(6, dtype=np.float32).reshape(3, 2) / 3.0), name="w")
    k2 = tp.Variable(tp.constant(np.linspace(-1, 1, 18, dtype=np.float32).reshape(3, 3, 1, 2)), name="k2")

    def fn(x, k):
        y = tp.clip(tp.where(x > 0.5, x, -x), -2.0, 2.0)
        s = tp.nn.softmax(tp.nn.relu(y @ w), axis=-1)
        oh = tp.one_hot(tp.argmax(s, axis=-1), 2)
        z = tp.cumsum(tp.tile(tp.pad(tp.concat([s, tp.cast(oh, "float32")], axis=1), [[0, 0], [1, 1]]), [1, 2]), 1)
        z = tp.max(z, axis=1)
        top_values, top_indices = tp.top_k(k, 2)
        picked = tp.sum(tp.gather(k, tp.constant([2, 0, 1]))) + tp.sum(tp.sort(k, axis=-1)) + tp.sum(top_values)
        loop = tp.while_loop(lambda i, s: i < 3, lambda i, s: (i + 1, s * 0.5 + 1.0), (0, z))[1]
        c = tp.cond(tp.sum(x) > 0, lambda: loop + 1.0, lambda: loop - 1.0)
        img = tp.reshape(tp.tile(x, [1, 12])[:, :32], (-1, 4, 4, 2))
        pool = tp.nn.max_pool2d(tp.nn.conv2d(img[..., :1], k2, strides=1, padding="SAME"), 2, 2, "VALID")
        stacked = tp.stack([tp.squeeze(tp.expand_dims(c, 0), 0), c], axis=0)
        return stacked, picked + tp.sum(tp.cast(top_indices, "float32")), tp.exp(tp.log(tp.abs(pool) + 1.0))

    return tp.freeze(fn, tp.TensorSpec((None, 3)), tp.TensorSpec((3, 4)))


def make_files(directory: str) -> dict:
    tp.random.seed(0)
    text, image = _compiled(text_model), _compiled(image_model)
    text.fit(_TOKENS, np.eye(3, dtype=np.float32)[[0, 1, 2, 0]], epochs=1, batch_size=2, verbose=0, callbacks=[])
    image.fit(_IMAGES, np.ones((2, 2), np.float32), epochs=1, verbose=0, callbacks=[])
    files = {
        "graph_ops": ("graph", lambda p: _ops_graph().save(p)),
        "graph_model": ("graph", lambda p: tp.freeze(lambda x: text(x), tp.TensorSpec((None, 8), "int32")).save(p)),
        "model_text": ("model", text.save),
        "model_image": ("model", image.save),
        "weights_text": ("weights", text.save_weights),
        "weights_image_named": ("weights", lambda p: tp.io.save_weights(image, p)),
        "checkpoint_text": ("checkpoint", lambda p: tp.io.save_checkpoint(p, text, text.optimizer, 4, {"lr": 0.01})),
        "checkpoint_image": ("checkpoint", lambda p: tp.io.save_checkpoint(p, image, image.optimizer, 2, None)),
    }
    out = {}
    for name, (kind, write) in files.items():
        path = os.path.join(directory, f"{name}.{'tfg' if kind == 'graph' else 'h5'}")
        write(path)
        out[name] = {"kind": kind, "path": path}
    return out


# ------------------------------------------------------------------ loading
def _digest(*parts) -> str:
    h = hashlib.sha256()
    for part in parts:
        if isinstance(part, dict):
            part = [(k, part[k]) for k in sorted(part)]
        if isinstance(part, list | tuple):
            h.update(_digest(*part).encode())
            continue
        if hasattr(part, "numpy"):
            part = part.numpy()
        if isinstance(part, np.ndarray | np.generic):
            part = np.ascontiguousarray(part)
            h.update(f"{part.dtype}{part.shape}".encode())
            h.update(part.tobytes())
        else:
            h.update(json.dumps(part, sort_keys=True, default=repr).encode())
    return h.hexdigest()


def _inputs(name: str):
    return _IMAGES if "image" in name else _TOKENS


def _load(name: str, path: str):
    """Load `path` as the original `name` is loaded; returns what to run."""
    if name.startswith("graph"):
        graph = tp.load_graph(path)
        args = (_GRAPH_X, _GRAPH_K) if name == "graph_ops" else (_TOKENS.astype(np.int32),)
        return lambda: [[(k, v.numpy()) for k, v in sorted(graph.state.items())], tp.tree.flatten(graph(*args))]
    build = image_model if "image" in name else text_model
    if name.startswith("model"):
        model = tp.models.load_model(path)
    elif name.startswith("weights"):
        model = build()
        if name.endswith("named"):
            tp.io.load_weights(model, path)
        else:
            model.load_weights(path)
    else:
        model = _compiled(build)
        model.optimizer.build(model.trainable_weights)
        info = tp.io.load_checkpoint(path, model, model.optimizer)
        rng = tp.random.global_generator().get_state()
        state = model.optimizer.get_state()
        extra = [info.epoch, info.shuffle_seed, info.extra, rng, [(k, np.asarray(state[k])) for k in sorted(state)]]
        return lambda: [model.get_weights(), extra, model(_inputs(name), training=False)]
    return lambda: [model.get_weights(), model(_inputs(name), training=False)]


def _names_file(err: BaseException, path: str) -> bool:
    return os.path.basename(path) in str(err)


def answer(request: dict, replies) -> dict:
    if "make" in request:
        return make_files(request["make"])
    name, path = request["original"], request["path"]
    if "source" in request:  # make the mutant here, so that several workers make them in parallel
        description, refuse = test_structure_fuzz.make_mutant(
            request["source"], request["kind"], random.Random(request["seed"]), path
        )
        replies.write(json.dumps({"description": description, "refuse": refuse}) + "\n")
        replies.flush()
    try:
        run = _load(name, path)
    except MemoryError as err:
        return {"outcome": "oom", "detail": f"at load: {str(err)[:300]}"}
    except (ValueError, TypeError) as err:
        if _names_file(err, path):
            return {"outcome": "refused", "detail": f"{type(err).__name__}: {str(err)[:300]}"}
        return {"outcome": "raw", "detail": f"{type(err).__name__} not naming the file: {str(err)[:300]}"}
    except Exception as err:  # noqa: BLE001 - every other failure is what the campaign counts
        return {"outcome": "raw", "detail": f"{type(err).__name__}: {str(err)[:300]}"}
    replies.write(json.dumps({"stage": "run"}) + "\n")
    replies.flush()
    try:
        return {"outcome": "loaded", "detail": _digest(run())}
    except MemoryError as err:
        return {"outcome": "oom", "detail": f"at run: {str(err)[:300]}"}
    except (ValueError, TypeError) as err:
        return {"outcome": "run_error", "detail": f"{type(err).__name__}: {str(err)[:300]}"}
    except tp.graph.executor.NodeError as err:
        if any(f"failed: {kind.__name__}" in str(err) for kind in (ValueError, TypeError)):
            return {"outcome": "run_error", "detail": f"{type(err).__name__}: {str(err)[:300]}"}
        return {"outcome": "raw", "detail": f"at run: {type(err).__name__}: {str(err)[:300]}"}
    except Exception as err:  # noqa: BLE001 - every other failure is what the campaign counts
        return {"outcome": "raw", "detail": f"at run: {type(err).__name__}: {str(err)[:300]}"}


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--memory", type=int, default=1 << 30, help="address-space limit in bytes (0: none)")
    args = parser.parse_args()
    warnings.simplefilter("ignore")
    if args.memory:
        resource.setrlimit(resource.RLIMIT_AS, (args.memory, args.memory))
    replies = os.fdopen(os.dup(1), "w")
    os.dup2(2, 1)  # whatever a load prints goes to stderr, not into the replies
    sys.stdout = sys.stderr
    replies.write(json.dumps({"ready": True}) + "\n")
    replies.flush()
    for line in sys.stdin:
        reply = answer(json.loads(line), replies)
        replies.write(json.dumps(reply) + "\n")
        replies.flush()


if __name__ == "__main__":
    main()
