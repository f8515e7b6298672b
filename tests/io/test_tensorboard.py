"""TensorBoard event files written without TensorFlow, read back by the real tensorboard package.

The CRC32C and TFRecord checks need nothing else; the rest compare against tensorboard's own
protobuf classes and its EventAccumulator, and skip when tensorboard is not installed.
"""

import os
import re
import socket

import numpy as np
import pytest

import tapeflow as tp
from tapeflow.callbacks import Callback, TensorBoard
from tapeflow.io import tensorboard as tb_events

try:
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator
    from tensorboard.compat.proto import event_pb2, graph_pb2, histogram_pb2, summary_pb2
    from tensorboard.compat.tensorflow_stub import pywrap_tensorflow
    from tensorboard.util import tensor_util
except ImportError:  # the `test` extra installs it; without it only the format checks run
    EventAccumulator = None

needs_tensorboard = pytest.mark.skipif(EventAccumulator is None, reason="tensorboard is not installed")


# ------------------------------------------------------------- CRC32C and TFRecord


@pytest.mark.parametrize(
    "data, crc",
    [
        (b"123456789", 0xE3069283),  # the standard check value
        (b"", 0x00000000),
        (bytes(32), 0x8A9136AA),  # RFC 3720, appendix B.4
        (b"\xff" * 32, 0x62A8AB43),
        (bytes(range(32)), 0x46DD794E),
    ],
)
def test_crc32c_known_vectors(data, crc):
    assert tb_events.crc32c(data) == crc


@needs_tensorboard
def test_masked_crc32c_matches_tensorboards_reader(rng):
    for size in (0, 1, 7, 8, 100, 1000):
        data = rng.integers(0, 256, size, dtype=np.uint8).tobytes()
        assert tb_events.masked_crc32c(data) == pywrap_tensorflow.masked_crc32c(data)


def test_records_round_trip_and_corruption_is_detected(tmp_path):
    with tb_events.EventFileWriter(tmp_path) as writer:
        writer.add_scalar("a", 1.0, step=0)
        writer.add_scalar("b", 2.0, step=1)
    records = tb_events.read_records(writer.path)
    assert len(records) == 3
    blob = bytearray(open(writer.path, "rb").read())
    blob[-6] ^= 0x01  # a bit in the last record's data
    corrupt = tmp_path / "corrupt"
    corrupt.write_bytes(bytes(blob))
    with pytest.raises(ValueError, match="CRC"):
        tb_events.read_records(corrupt)
    truncated = tmp_path / "truncated"
    truncated.write_bytes(bytes(blob[:-3]))
    with pytest.raises(ValueError, match="truncated"):
        tb_events.read_records(truncated)


def test_event_files_are_named_and_never_overwritten(tmp_path):
    first, second = tb_events.EventFileWriter(tmp_path), tb_events.EventFileWriter(tmp_path, ".extra")
    third = tb_events.EventFileWriter(tmp_path)
    for writer in (first, second, third):
        writer.close()
    host = re.escape(socket.gethostname())
    assert re.fullmatch(rf"events\.out\.tfevents\.\d{{10}}\.{host}", os.path.basename(first.path))
    assert second.path.endswith(".extra")
    assert len({first.path, second.path, third.path}) == 3
    with pytest.raises(ValueError, match="closed"):
        first.add_scalar("x", 0.0, 0)


# ------------------------------------------------------------- protobuf messages


@needs_tensorboard
@pytest.mark.parametrize("step", [0, 1, 300, 2**40, -3])
def test_events_decode_with_protobuf(step):
    event = event_pb2.Event.FromString(tb_events.encode_event(1234.5, step, file_version="brain.Event:2"))
    assert (event.wall_time, event.step, event.file_version) == (1234.5, step, "brain.Event:2")
    summary = tb_events.scalar_summary("loss/train", 0.1)
    event = event_pb2.Event.FromString(tb_events.encode_event(1.0, step, summary=summary))
    [value] = event.summary.value
    assert value.tag == "loss/train" and value.simple_value == np.float32(0.1)
    assert summary == summary_pb2.Summary(value=[value]).SerializeToString()


@needs_tensorboard
def test_histogram_and_graph_decode_with_protobuf(rng):
    values = rng.standard_normal(1000)
    values[:3] = [np.nan, np.inf, -np.inf]  # left out
    [value] = summary_pb2.Summary.FromString(tb_events.histogram_summary("w", values, bins=20)).value
    histo, finite = value.histo, values[3:]
    counts, edges = np.histogram(finite, bins=20)
    assert (histo.min, histo.max, histo.num) == (finite.min(), finite.max(), finite.size)
    np.testing.assert_allclose([histo.sum, histo.sum_squares], [finite.sum(), (finite**2).sum()], rtol=1e-12)
    np.testing.assert_array_equal(histo.bucket_limit, edges[1:])
    np.testing.assert_array_equal(histo.bucket, counts)
    empty = summary_pb2.Summary.FromString(tb_events.histogram_summary("e", [])).value[0].histo
    assert empty == histogram_pb2.HistogramProto()

    graph = graph_pb2.GraphDef.FromString(tb_events.graph_def([("in", "Dense", []), ("out", "Softmax", ["in"])]))
    assert [(n.name, n.op, list(n.input)) for n in graph.node] == [("in", "Dense", []), ("out", "Softmax", ["in"])]


# --------------------------------------------------------------- the callback


def _fit(log_dir, epochs=3, callbacks=(), **options):
    rng = np.random.default_rng(0)
    x = rng.standard_normal((64, 4)).astype("float32")
    y = (x[:, 0] > 0).astype("int64") + (x[:, 1] > 0.5)
    model = tp.Sequential([tp.layers.Dense(8, activation="relu"), tp.layers.Dense(3, activation="softmax")])
    model.compile(tp.optimizers.SGD(0.1), "sparse_categorical_crossentropy", metrics=["accuracy"])
    board = TensorBoard(str(log_dir), **options)
    history = model.fit(
        x, y, batch_size=16, epochs=epochs, validation_data=(x[:32], y[:32]), callbacks=[board, *callbacks], verbose=0
    )
    return model, history, board


def _accumulator(run_dir):
    acc = EventAccumulator(str(run_dir), size_guidance={"scalars": 0, "histograms": 0, "tensors": 0})
    acc.Reload()
    return acc


def _scalars(acc, tag):
    """(step, value) pairs of a scalar tag, whether tensorboard kept it as a scalar or a tensor."""
    tags = acc.Tags()
    if tag in tags["scalars"]:
        return [(event.step, event.value) for event in acc.Scalars(tag)]
    assert tag in tags["tensors"], f"{tag!r} not in {tags}"
    return [(event.step, float(tensor_util.make_ndarray(event.tensor_proto))) for event in acc.Tensors(tag)]


@needs_tensorboard
def test_epoch_scalars_go_to_train_and_validation_runs(tmp_path):
    model, history, _ = _fit(tmp_path)
    assert sorted(os.listdir(tmp_path)) == ["train", "validation"]
    train, validation = _accumulator(tmp_path / "train"), _accumulator(tmp_path / "validation")
    for name in ("loss", "accuracy"):
        for acc, key in ((train, name), (validation, f"val_{name}")):
            steps, values = zip(*_scalars(acc, f"epoch_{name}"), strict=True)
            assert steps == (0, 1, 2)
            np.testing.assert_allclose(values, history.history[key], rtol=1e-6)
    assert [value for _, value in _scalars(train, "epoch_learning_rate")] == [np.float32(0.1)] * 3
    assert not [tag for tag in train.Tags()["scalars"] if tag.startswith("batch_")]


@needs_tensorboard
def test_weight_histograms_every_histogram_freq_epochs(tmp_path):
    model, _, _ = _fit(tmp_path, epochs=3, histogram_freq=2)
    train = _accumulator(tmp_path / "train")
    names = [w.name for w in model.weights]
    assert sorted(train.Tags()["histograms"]) == sorted(names)
    for weight in model.weights:
        events = train.Histograms(weight.name)
        assert [event.step for event in events] == [0, 2]
        histo, values = events[-1].histogram_value, weight.numpy().astype(np.float64)  # the last epoch's weights
        assert (histo.num, histo.min, histo.max) == (values.size, values.min(), values.max())
        np.testing.assert_allclose(histo.sum, values.sum(), rtol=1e-9, atol=1e-12)
        assert sum(histo.bucket) == values.size


@needs_tensorboard
def test_graph_is_the_frozen_op_graph(tmp_path):
    model, _, _ = _fit(tmp_path, epochs=1)
    graph = _accumulator(tmp_path / "train").Graph()
    assert sorted(n.name for n in graph.node if n.op == "VariableV2") == sorted(w.name for w in model.weights)
    frozen = model.freeze()
    assert sorted(n.op for n in graph.node if n.op not in ("Placeholder", "VariableV2")) == sorted(
        n.op for n in frozen.nodes
    )
    assert [n.op for n in graph.node].count("fused_matmul") == 2
    _fit(tmp_path / "nograph", epochs=1, write_graph=False)
    assert not _accumulator(tmp_path / "nograph" / "train").Tags()["graph"]


@needs_tensorboard
def test_batch_scalars_every_update_freq_batches(tmp_path):
    # 64 samples in batches of 16: 4 batches an epoch, 12 in all; every 3rd is written
    _, _, board = _fit(tmp_path, update_freq=3, min_interval_s=0)
    steps = [step for step, _ in _scalars(_accumulator(tmp_path / "train"), "batch_loss")]
    assert steps == [3, 6, 9, 12]
    assert board._writers == {}  # closed at the end of training


@needs_tensorboard
def test_batch_scalars_are_throttled_by_default(tmp_path):
    _fit(tmp_path, update_freq=1, min_interval_s=1e9)
    steps = [step for step, _ in _scalars(_accumulator(tmp_path / "train"), "batch_loss")]
    assert steps == [1]  # the first write, then nothing within the interval
    assert TensorBoard().min_interval_s == 1.0


class EventCounter(Callback):
    """Reads the train event file at each epoch's end: the epoch's scalars must already be on disk."""

    def __init__(self, run_dir):
        super().__init__()
        self.run_dir, self.losses = run_dir, []

    def on_epoch_end(self, epoch, logs=None):
        [name] = os.listdir(self.run_dir)
        self.losses.append(
            sum(
                value.tag == "epoch_loss"
                for record in tb_events.read_records(os.path.join(self.run_dir, name))
                for value in event_pb2.Event.FromString(record).summary.value
            )
        )


@needs_tensorboard
def test_events_are_flushed_at_each_epoch_end(tmp_path):
    counter = EventCounter(tmp_path / "train")
    _fit(tmp_path, epochs=3, callbacks=[counter])
    assert counter.losses == [1, 2, 3]


def test_tensorboard_rejects_bad_options():
    with pytest.raises(ValueError, match="update_freq"):
        TensorBoard(update_freq="batch")
    with pytest.raises(ValueError, match="histogram_freq"):
        TensorBoard(histogram_freq=-1)
