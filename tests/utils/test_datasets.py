"""timeseries_dataset_from_array, image_dataset_from_directory and
text_dataset_from_directory: file order and labels against Keras 3's own indexing, pixels
against Keras's resize (torch backend), windows against NumPy."""

from __future__ import annotations

import os

import keras
import numpy as np
import pytest
from keras.src.utils import dataset_utils as keras_dataset_utils

import tapeflow as tp

pytest.importorskip("PIL")


def _batches(dataset):
    return [
        tuple(np.asarray(part) for part in batch) if isinstance(batch, tuple) else np.asarray(batch)
        for batch in dataset
    ]


@pytest.mark.parametrize(
    "kwargs",
    [
        {"sequence_length": 4},
        {"sequence_length": 3, "sequence_stride": 2, "sampling_rate": 2},
        {"sequence_length": 2, "start_index": 3, "end_index": 15, "batch_size": 4},
        {"sequence_length": 5, "batch_size": None},
    ],
)
def test_timeseries_windows_match_numpy(kwargs):
    data = np.arange(40, dtype="float32").reshape(20, 2)
    targets = np.arange(20) * 10
    settings = {"sequence_stride": 1, "sampling_rate": 1, "batch_size": 3, "start_index": 0, "end_index": 20} | kwargs
    ds = tp.utils.timeseries_dataset_from_array(data, targets, **kwargs)
    start, stop, rate = settings["start_index"], settings["end_index"], settings["sampling_rate"]
    count = stop - start - (settings["sequence_length"] - 1) * rate
    starts = range(0, count, settings["sequence_stride"])
    windows = [data[start + p : start + p + settings["sequence_length"] * rate : rate] for p in starts]
    labels = [targets[start + p] for p in starts]
    got = _batches(ds)
    if settings["batch_size"] is None:
        got_x, got_y = [b[0] for b in got], [b[1] for b in got]
    else:
        got_x = [w for b in got for w in b[0]]
        got_y = [v for b in got for v in b[1]]
        assert all(len(b[0]) == settings["batch_size"] for b in got[:-1])
    np.testing.assert_array_equal(np.stack(got_x), np.stack(windows))
    np.testing.assert_array_equal(np.array(got_y), np.array(labels))


def test_timeseries_shuffle_keeps_every_window_with_its_target():
    data = np.arange(30)
    ds = tp.utils.timeseries_dataset_from_array(data, data * 2, 3, batch_size=4, shuffle=True, seed=5)
    pairs = [(tuple(x), int(y)) for xb, yb in _batches(ds) for x, y in zip(xb, yb, strict=True)]
    assert sorted(pairs) == [((p, p + 1, p + 2), 2 * p) for p in range(28)]


def test_timeseries_without_targets_and_bad_arguments():
    (only,) = _batches(tp.utils.timeseries_dataset_from_array(np.arange(5), None, 4))
    np.testing.assert_array_equal(only, [[0, 1, 2, 3], [1, 2, 3, 4]])
    with pytest.raises(ValueError, match="sampling_rate"):
        tp.utils.timeseries_dataset_from_array(np.arange(5), None, 2, sampling_rate=0)
    with pytest.raises(ValueError, match="end_index"):
        tp.utils.timeseries_dataset_from_array(np.arange(5), None, 2, start_index=3, end_index=2)


@pytest.fixture
def image_folder(tmp_path):
    rng = np.random.default_rng(0)
    sizes = {"ant": [(9, 7), (6, 6)], "bee": [(5, 8), (7, 7), (4, 9)], "cat": [(8, 8)]}
    for name, shapes in sizes.items():
        os.makedirs(tmp_path / name / "inner")
        for i, (h, w) in enumerate(shapes):
            where = tmp_path / name / ("inner" if i == 2 else "") / f"{i}.png"
            keras.utils.save_img(where, rng.integers(0, 256, (h, w, 3)).astype("float32"), scale=False)
    (tmp_path / "ant" / "notes.txt").write_text("not an image")
    return tmp_path


def _keras_pixels(path, size, color_mode="rgb", crop=False):
    image = keras.utils.img_to_array(keras.utils.load_img(path, color_mode=color_mode))
    resized = keras.ops.image.resize(image, size, interpolation="bilinear", crop_to_aspect_ratio=crop)
    return keras.ops.convert_to_numpy(resized)


@pytest.mark.parametrize("label_mode", ["int", "categorical"])
@pytest.mark.parametrize("crop", [False, True])
def test_image_dataset_matches_keras(image_folder, label_mode, crop):
    ds = tp.utils.image_dataset_from_directory(
        image_folder, label_mode=label_mode, image_size=(5, 6), batch_size=4, shuffle=False, crop_to_aspect_ratio=crop
    )
    paths, labels, names = keras_dataset_utils.index_directory(
        str(image_folder), "inferred", formats=(".png",), shuffle=False
    )
    assert ds.class_names == names == ["ant", "bee", "cat"] and ds.file_paths == paths
    images = np.concatenate([b[0] for b in _batches(ds)])
    got_labels = np.concatenate([b[1] for b in _batches(ds)])
    expected = np.stack([_keras_pixels(p, (5, 6), crop=crop) for p in paths])
    assert images.dtype == np.float32 and images.shape == (6, 5, 6, 3)
    np.testing.assert_allclose(images, expected, atol=1e-3)
    want = keras.utils.to_categorical(labels, 3) if label_mode == "categorical" else labels
    np.testing.assert_array_equal(got_labels, want)


def test_image_dataset_shuffled_order_and_split_match_keras(image_folder):
    train, val = tp.utils.image_dataset_from_directory(
        image_folder,
        image_size=(4, 4),
        color_mode="grayscale",
        seed=7,
        validation_split=0.34,
        subset="both",
        verbose=False,
    )
    paths, _, _ = keras_dataset_utils.index_directory(str(image_folder), "inferred", (".png",), seed=7, verbose=False)
    held_out = int(0.34 * len(paths))
    assert train.file_paths == paths[:-held_out] and val.file_paths == paths[-held_out:]
    ((images, labels),) = _batches(val)
    assert images.shape == (held_out, 4, 4, 1) and labels.dtype == np.int32
    np.testing.assert_allclose(images[0], _keras_pixels(val.file_paths[0], (4, 4), "grayscale"), atol=1e-3)


def test_image_dataset_refuses_bad_arguments(image_folder):
    with pytest.raises(ValueError, match="seed"):
        tp.utils.image_dataset_from_directory(image_folder, validation_split=0.2, subset="training")
    with pytest.raises(ValueError, match="exactly 2"):
        tp.utils.image_dataset_from_directory(image_folder, label_mode="binary", verbose=False)
    with pytest.raises(ValueError, match="interpolation"):
        tp.utils.image_dataset_from_directory(image_folder, interpolation="lanczos5")


def test_text_dataset_matches_keras_indexing(tmp_path):
    texts = {"neg": ["awful", "dull and slow"], "pos": ["great fun", "superb", "fine"]}
    for label, items in texts.items():
        os.makedirs(tmp_path / label)
        for i, text in enumerate(items):
            (tmp_path / label / f"{i}.txt").write_text(text)
    ds = tp.utils.text_dataset_from_directory(tmp_path, batch_size=2, seed=3, max_length=5, label_mode="binary")
    paths, labels, names = keras_dataset_utils.index_directory(str(tmp_path), "inferred", (".txt",), seed=3)
    assert ds.class_names == names and sorted(ds.file_paths) == sorted(paths)
    got = [(str(t), float(y[0])) for tb, yb in _batches(ds) for t, y in zip(tb, yb, strict=True)]
    want = [(open(p).read()[:5], float(label)) for p, label in zip(paths, labels, strict=True)]
    assert sorted(got) == sorted(want)
