"""Text classification with a Transformer block, written as the Keras 3 example of the same
name writes it: token and position embeddings, multi-head self-attention, layer
normalization and a feed-forward block, then pooling and a softmax.

    python tutorials/transformer/text_classification.py              # synthetic reviews
    python tutorials/transformer/text_classification.py --texts reviews.tsv --epochs 4

The data are short "reviews": a label and a sentence, one per line of a tab-separated file,
or (by default) sentences generated from a small vocabulary where praise and complaint words
decide the label and negations flip them, so that word order matters. Words map to ids in
plain Python (tapeflow has no string tensors); the model sees padded id sequences.

After training, the script freezes the model into a graph, saves it as a `.tfg` file, loads
it back and checks that the served graph predicts what the model predicts; with `--onnx` it
also exports the graph to ONNX and compares onnxruntime's predictions.
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

import tapeflow as keras
from tapeflow import layers, ops

PRAISE = ["good", "great", "fine", "lovely", "superb", "excellent", "pleasant", "brilliant"]
COMPLAINT = ["bad", "awful", "poor", "boring", "dull", "terrible", "weak", "clumsy"]
FILLER = ["the", "film", "plot", "acting", "was", "really", "quite", "and", "a", "story", "music", "very", "so"]


def synthetic_reviews(count: int, seed: int) -> tuple[list[str], np.ndarray]:
    """Sentences whose label is the sign of (praise - complaint) words, each flipped by a
    preceding "not"."""
    rng = np.random.default_rng(seed)
    texts, labels = [], []
    while len(texts) < count:
        words, score = [], 0
        for _ in range(rng.integers(6, 20)):
            kind = rng.random()
            if kind < 0.2:
                negated = rng.random() < 0.3
                good = rng.random() < 0.5
                words += (["not"] if negated else []) + [str(rng.choice(PRAISE if good else COMPLAINT))]
                score += (1 if good else -1) * (-1 if negated else 1)
            else:
                words.append(str(rng.choice(FILLER)))
        if score:
            texts.append(" ".join(words))
            labels.append(int(score > 0))
    return texts, np.array(labels)


def read_reviews(path: Path) -> tuple[list[str], np.ndarray]:
    texts, labels = [], []
    for number, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
        if not line.strip():
            continue
        label, sep, text = line.partition("\t")
        if not sep or label not in ("0", "1"):
            raise SystemExit(f"{path}:{number}: expected '<0 or 1><TAB><text>', got {line[:60]!r}")
        texts.append(text)
        labels.append(int(label))
    return texts, np.array(labels)


def vectorize(texts: list[str], vocab_size: int, maxlen: int) -> tuple[np.ndarray, dict[str, int]]:
    """Ids of the `vocab_size - 2` most frequent words (0 pads, 1 is any other word), padded."""
    counts: dict[str, int] = {}
    for text in texts:
        for word in text.lower().split():
            counts[word] = counts.get(word, 0) + 1
    ranked = sorted(counts, key=lambda w: (-counts[w], w))[: vocab_size - 2]
    index = {word: i + 2 for i, word in enumerate(ranked)}
    sequences = [[index.get(word, 1) for word in text.lower().split()] for text in texts]
    return keras.utils.pad_sequences(sequences, maxlen=maxlen, padding="post", truncating="post"), index


class TransformerBlock(layers.Layer):
    def __init__(self, embed_dim, num_heads, ff_dim, rate=0.1, **kwargs):
        super().__init__(**kwargs)
        self.att = layers.MultiHeadAttention(num_heads=num_heads, key_dim=embed_dim)
        self.ffn = keras.Sequential([layers.Dense(ff_dim, activation="relu"), layers.Dense(embed_dim)])
        self.layernorm1 = layers.LayerNormalization(epsilon=1e-6)
        self.layernorm2 = layers.LayerNormalization(epsilon=1e-6)
        self.dropout1 = layers.Dropout(rate)
        self.dropout2 = layers.Dropout(rate)

    def call(self, inputs, training=False):
        attn_output = self.att(inputs, inputs)
        attn_output = self.dropout1(attn_output, training=training)
        out1 = self.layernorm1(inputs + attn_output)
        ffn_output = self.ffn(out1)
        ffn_output = self.dropout2(ffn_output, training=training)
        return self.layernorm2(out1 + ffn_output)


class TokenAndPositionEmbedding(layers.Layer):
    def __init__(self, maxlen, vocab_size, embed_dim, **kwargs):
        super().__init__(**kwargs)
        self.token_emb = layers.Embedding(input_dim=vocab_size, output_dim=embed_dim)
        self.pos_emb = layers.Embedding(input_dim=maxlen, output_dim=embed_dim)

    def call(self, x):
        maxlen = ops.shape(x)[-1]
        positions = ops.arange(start=0, stop=maxlen, step=1)
        return self.token_emb(x) + self.pos_emb(positions)


def build_model(maxlen: int, vocab_size: int, embed_dim: int, num_heads: int, ff_dim: int) -> keras.Model:
    inputs = layers.Input(shape=(maxlen,), dtype="int32")
    x = TokenAndPositionEmbedding(maxlen, vocab_size, embed_dim)(inputs)
    x = TransformerBlock(embed_dim, num_heads, ff_dim)(x)
    x = layers.GlobalAveragePooling1D()(x)
    x = layers.Dropout(0.1)(x)
    x = layers.Dense(20, activation="relu")(x)
    x = layers.Dropout(0.1)(x)
    outputs = layers.Dense(2, activation="softmax")(x)
    return keras.Model(inputs=inputs, outputs=outputs)


def serve_check(model: keras.Model, x: np.ndarray, out_dir: Path, onnx: bool) -> None:
    """Freeze, save, load and serve the model; the served graph must predict what it does."""
    expected = model.predict(x, verbose=0)
    graph = model.freeze()
    path = out_dir / "transformer.tfg"
    graph.save(str(path))
    served = keras.load_graph(str(path))(x)
    served = np.asarray(served[0] if isinstance(served, list | tuple) else served)
    np.testing.assert_allclose(served, expected, rtol=1e-4, atol=1e-5)
    print(f"served from {path.name}: {len(graph.nodes)} nodes, predictions match the model")
    if onnx:
        import onnxruntime  # lazily: an optional extra

        onnx_path = out_dir / "transformer.onnx"
        graph.export_onnx(str(onnx_path))
        session = onnxruntime.InferenceSession(str(onnx_path), providers=["CPUExecutionProvider"])
        first = session.get_inputs()[0]
        got = session.run(None, {first.name: x.astype("int64" if first.type == "tensor(int64)" else "int32")})
        np.testing.assert_allclose(got[0], expected, rtol=1e-4, atol=1e-5)
        print(f"exported {onnx_path.name}: onnxruntime predicts the same")


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--texts", type=Path, help="a file of '<label>\\t<text>' lines (default: synthetic)")
    parser.add_argument("--samples", type=int, default=2000, help="synthetic reviews to generate")
    parser.add_argument("--vocab-size", type=int, default=200)
    parser.add_argument("--maxlen", type=int, default=24)
    parser.add_argument("--embed-dim", type=int, default=32)
    parser.add_argument("--num-heads", type=int, default=2)
    parser.add_argument("--ff-dim", type=int, default=32)
    parser.add_argument("--epochs", type=int, default=8)
    parser.add_argument("--batch-size", type=int, default=32)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--onnx", action="store_true", help="also export to ONNX and check onnxruntime")
    parser.add_argument("--out", type=Path, help="where the .tfg goes (default: a temporary folder)")
    args = parser.parse_args(argv)
    for name in ("samples", "vocab_size", "maxlen", "embed_dim", "num_heads", "ff_dim", "epochs", "batch_size"):
        if getattr(args, name) < 1:
            parser.error(f"--{name.replace('_', '-')} must be >= 1")

    keras.utils.set_random_seed(args.seed)
    texts, labels = read_reviews(args.texts) if args.texts else synthetic_reviews(args.samples, args.seed)
    x, _ = vectorize(texts, args.vocab_size, args.maxlen)
    x = x.astype("int32")
    split = int(0.8 * len(x))
    x_train, y_train, x_val, y_val = x[:split], labels[:split], x[split:], labels[split:]
    print(f"{len(x_train)} training and {len(x_val)} validation sequences of {args.maxlen} ids")

    model = build_model(args.maxlen, args.vocab_size, args.embed_dim, args.num_heads, args.ff_dim)
    model.compile(optimizer="adam", loss="sparse_categorical_crossentropy", metrics=["accuracy"])
    start = time.perf_counter()
    history = model.fit(
        x_train, y_train, batch_size=args.batch_size, epochs=args.epochs, validation_data=(x_val, y_val), verbose=2
    )
    seconds = time.perf_counter() - start
    losses = history.history["loss"]
    print("loss per epoch:", ", ".join(f"{v:.4f}" for v in losses))
    print(f"validation accuracy: {history.history['val_accuracy'][-1]:.4f} after {seconds:.1f} s of training")

    with tempfile.TemporaryDirectory() as scratch:
        out_dir = args.out or Path(scratch)
        out_dir.mkdir(parents=True, exist_ok=True)
        serve_check(model, x_val[:16], out_dir, args.onnx)
    return 0


if __name__ == "__main__":
    sys.exit(main())
