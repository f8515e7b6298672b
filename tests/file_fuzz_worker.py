"""The process that loads byte-mutated files for tests/test_file_fuzz.py.

Once imported, it writes {"ready": true}; then it reads one JSON request per line on
stdin and answers one JSON line on stdout:

- {"make": directory}: write one valid file of each kind there; answers {kind: path};
- {"kind": k, "path": p}: load p as a file of kind k; answers {"outcome": o, "detail": d},
  where o is "loaded" (with d the digest of everything loaded), "refused" (a ValueError
  that names the file) or "raw" (any other exception: d says which).

Only the public API is used, so the same worker measures any tapeflow version.
"""

from __future__ import annotations

import hashlib
import json
import os
import sys

import numpy as np

import tapeflow as tp

KINDS = ("graph", "weights", "named_weights", "model", "checkpoint")
_X = (np.arange(12, dtype=np.float32).reshape(4, 3) - 5.0) / 7.0


def build_model():
    """The model every file holds (names given, so any process rebuilds the same one)."""
    return tp.Sequential(
        [
            tp.Input((3,)),
            tp.layers.Dense(5, activation="relu", name="hidden"),
            tp.layers.Dropout(0.25, seed=3, name="drop"),
            tp.layers.Dense(2, name="out"),
        ],
        name="fuzzed",
    )


def _compiled():
    model = build_model()
    model.compile(optimizer=tp.optimizers.Adam(1e-2), loss="mse")
    return model


def make_files(directory: str) -> dict[str, str]:
    tp.random.seed(0)
    model = _compiled()
    model.fit(_X, np.ones((4, 2), np.float32), epochs=1, batch_size=2, verbose=0)
    paths = {kind: os.path.join(directory, f"{kind}.h5") for kind in KINDS}
    w = tp.Variable(tp.constant(np.arange(6, dtype=np.float32).reshape(3, 2) / 3.0), name="w")
    graph = tp.freeze(
        lambda x: tp.while_loop(lambda i, s: i < 3, lambda i, s: (i + 1, tp.nn.relu(s @ w) @ tp.transpose(w)), (0, x))[
            1
        ],
        tp.TensorSpec((None, 3)),
    )
    graph.save(paths["graph"])
    model.save_weights(paths["weights"])
    tp.io.save_weights(model, paths["named_weights"])
    model.save(paths["model"])
    tp.io.save_checkpoint(paths["checkpoint"], model, model.optimizer, epoch=4, extra={"lr": 0.01}, shuffle_seed=9)
    return paths


def _digest(*parts) -> str:
    h = hashlib.sha256()
    for part in parts:
        if isinstance(part, np.ndarray | np.generic):
            part = np.ascontiguousarray(part)
            h.update(f"{part.dtype}{part.shape}".encode())
            h.update(part.tobytes())
        elif isinstance(part, list | tuple):
            h.update(_digest(*part).encode())
        else:
            h.update(json.dumps(part, sort_keys=True, default=repr).encode())
    return h.hexdigest()


def _optimizer_state(optimizer) -> list:
    if optimizer is None:  # a model that loaded uncompiled
        return []
    state = optimizer.get_state()
    return [(k, np.asarray(state[k])) for k in sorted(state)]


def _graph_data(graph) -> list:
    """The constants and array or subgraph attributes of a graph and its subgraphs."""
    data = [np.asarray(v.data) for v in graph.constants]
    for node in graph.nodes:
        for name, value in sorted(node.attrs.items()):
            if isinstance(value, np.ndarray | np.generic):
                data.append(np.asarray(value))
            elif isinstance(value, tp.graph.ir.GraphIR):
                data.append(_graph_data(value))
            else:
                data.append(repr(value)[:10000])
            data.append(name)
    return data


def fingerprint(kind: str, path: str) -> str:
    """The digest of everything a load of `path` gives."""
    if kind == "graph":  # not run: a loop bound changed in a file without checksums may run for hours
        graph = tp.load_graph(path)
        state = [(k, v.numpy()) for k, v in sorted(graph.state.items())]
        return _digest(str(graph), state, _graph_data(graph))
    if kind in ("weights", "named_weights"):
        model = build_model()
        (model.load_weights if kind == "weights" else lambda p: tp.io.load_weights(model, p))(path)
        return _digest(model.get_weights())
    if kind == "model":
        model = tp.models.load_model(path)
        return _digest(
            model.get_weights(),
            _optimizer_state(getattr(model, "optimizer", None)),
            model.get_config(),
            model.predict(_X, verbose=0),
        )
    model = _compiled()
    model.optimizer.build(model.trainable_weights)
    info = tp.io.load_checkpoint(path, model, model.optimizer)
    generator = next(layer for layer in model.layers if layer.name == "drop").generator
    rng = [tp.random.global_generator().get_state(), generator.get_state()]
    return _digest(
        model.get_weights(), _optimizer_state(model.optimizer), info.epoch, info.shuffle_seed, info.extra, rng
    )


def answer(request: dict) -> dict:
    if "make" in request:
        return make_files(request["make"])
    path = request["path"]
    try:
        return {"outcome": "loaded", "detail": fingerprint(request["kind"], path)}
    except ValueError as err:
        if os.path.basename(path) in str(err):
            return {"outcome": "refused", "detail": str(err)[:300]}
        return {"outcome": "raw", "detail": f"{type(err).__name__} not naming the file: {str(err)[:300]}"}
    except Exception as err:  # noqa: BLE001 - every other failure is what the fuzz test counts
        return {"outcome": "raw", "detail": f"{type(err).__name__}: {str(err)[:300]}"}


def main() -> None:
    import warnings

    warnings.simplefilter("ignore")
    replies = os.fdopen(os.dup(1), "w")
    os.dup2(2, 1)  # whatever a load prints goes to stderr, not into the replies
    sys.stdout = sys.stderr
    replies.write(json.dumps({"ready": True}) + "\n")  # imported: timing the loads starts now
    replies.flush()
    for line in sys.stdin:
        replies.write(json.dumps(answer(json.loads(line))) + "\n")
        replies.flush()


if __name__ == "__main__":
    main()
