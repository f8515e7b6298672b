"""get_file (file:// URLs, hashes, archives, offline), Progbar's output, the image helpers
and the serialization names, each against Keras 3's own function."""

from __future__ import annotations

import hashlib
import io
import re
import shutil
import sys
import tarfile
import zipfile

import keras
import numpy as np
import pytest

import tapeflow as tp


def _source(tmp_path, text="tapeflow data\n"):
    for cache in ("ours", "keras"):  # Keras swaps a cache_dir that does not exist yet for /tmp/.keras
        (tmp_path / cache).mkdir()
    path = tmp_path / "source" / "data.txt"
    path.parent.mkdir()
    path.write_text(text)
    return path


@pytest.mark.parametrize("algorithm", ["sha256", "md5"])
def test_get_file_from_a_file_url_matches_keras(tmp_path, algorithm):
    source = _source(tmp_path)
    digest = hashlib.new(algorithm, source.read_bytes()).hexdigest()
    ours = tp.utils.get_file(origin=source.as_uri(), file_hash=digest, cache_dir=tmp_path / "ours")
    theirs = keras.utils.get_file(origin=source.as_uri(), file_hash=digest, cache_dir=str(tmp_path / "keras"))
    assert ours.replace("ours", "keras") == theirs
    assert open(ours).read() == open(theirs).read() == source.read_text()
    source.write_text("changed")  # a cached copy with the right hash is not fetched again
    assert open(tp.utils.get_file(origin=source.as_uri(), file_hash=digest, cache_dir=tmp_path / "ours")).read() == (
        "tapeflow data\n"
    )


def test_get_file_refuses_a_wrong_hash_and_leaves_no_file(tmp_path):
    source = _source(tmp_path)
    with pytest.raises(ValueError, match="hash does not match"):
        tp.utils.get_file("x.txt", origin=source.as_uri(), file_hash="0" * 64, cache_dir=tmp_path / "c")
    assert not (tmp_path / "c" / "datasets" / "x.txt").exists()


@pytest.mark.parametrize("kind", ["tar", "zip"])
def test_get_file_extracts_archives_where_keras_does(tmp_path, kind):
    source = _source(tmp_path)
    archive = tmp_path / f"bundle.{'tar.gz' if kind == 'tar' else 'zip'}"
    if kind == "tar":
        with tarfile.open(archive, "w:gz") as out:
            out.add(source, arcname="inside/data.txt")
    else:
        with zipfile.ZipFile(archive, "w") as out:
            out.write(source, "inside/data.txt")
    ours = tp.utils.get_file(archive.name, archive.as_uri(), extract=True, cache_dir=tmp_path / "ours")
    theirs = keras.utils.get_file(archive.name, archive.as_uri(), extract=True, cache_dir=str(tmp_path / "keras"))
    assert ours.replace("ours", "keras") == theirs
    assert open(f"{ours}/inside/data.txt").read() == source.read_text()


def test_get_file_offline_fails_fast_with_a_clear_error(tmp_path):
    with pytest.raises(OSError, match="could not download http://127.0.0.1:9/x.bin"):
        tp.utils.get_file("x.bin", "http://127.0.0.1:9/x.bin", cache_dir=tmp_path)
    with pytest.raises(ValueError, match="fname must be a file name"):
        tp.utils.get_file("a/b.txt", "file:///dev/null", cache_dir=tmp_path)


def _progbar_output(module, monkeypatch, verbose, steps):
    buffer = io.StringIO()
    monkeypatch.setattr(sys, "stdout", buffer)
    bar = module.utils.Progbar(4, verbose=verbose, interval=0.0, stateful_metrics=["acc"])
    for current, values in steps:
        bar.update(current, values)
    monkeypatch.undo()
    # times differ between runs, and with them how much the next redraw erases and pads
    text = re.sub(r"\d+(s|ms|us)(/step)?", "<t>", buffer.getvalue())
    return re.sub(r" *\x08+", "<erase>", re.sub(r" +(?=\n|$)", "", text))


@pytest.mark.parametrize("verbose", [1, 2])
def test_progbar_prints_what_keras_prints(monkeypatch, verbose):
    steps = [
        (1, [("loss", 2.0), ("acc", 0.5)]),
        (3, [("loss", 1.0), ("acc", 0.75)]),
        (4, [("loss", 0.0001), ("acc", 1.0)]),
    ]
    ours = _progbar_output(tp, monkeypatch, verbose, steps)
    theirs = _progbar_output(keras, monkeypatch, verbose, steps)
    assert ours == theirs and "loss" in ours


def test_progbar_averages_as_keras_does():
    ours, theirs = tp.utils.Progbar(10, verbose=0), keras.utils.Progbar(10, verbose=0)
    for bar in (ours, theirs):
        bar.update(2, [("loss", 1.0)])
        bar.add(3, [("loss", 2.0)])
    assert ours._values == theirs._values


def test_image_round_trip_matches_keras(tmp_path):
    pytest.importorskip("PIL")
    x = np.random.default_rng(0).uniform(0, 255, (5, 4, 3)).astype("float32")
    assert np.array_equal(
        tp.utils.img_to_array(tp.utils.array_to_img(x)), keras.utils.img_to_array(keras.utils.array_to_img(x))
    )
    tp.utils.save_img(tmp_path / "a.png", x)
    keras.utils.save_img(tmp_path / "b.png", x)
    for kwargs in (
        {},
        {"color_mode": "grayscale", "target_size": (3, 3)},
        {"target_size": (2, 3), "keep_aspect_ratio": True},
    ):
        ours = tp.utils.img_to_array(tp.utils.load_img(tmp_path / "a.png", **kwargs))
        theirs = keras.utils.img_to_array(keras.utils.load_img(tmp_path / "b.png", **kwargs))
        np.testing.assert_array_equal(ours, theirs)
    assert tp.utils.img_to_array(tp.utils.array_to_img(x), data_format="channels_first").shape == (3, 5, 4)
    with pytest.raises(ValueError, match="color_mode"):
        tp.utils.load_img(tmp_path / "a.png", color_mode="cmyk")


def test_serialize_round_trips_and_custom_objects():
    layer = tp.layers.Dense(3, activation="relu", name="d")
    config = tp.utils.serialize_keras_object(layer)
    assert config["class_name"] == "Dense" and config["config"]["units"] == 3
    rebuilt = tp.utils.deserialize_keras_object(config)
    assert isinstance(rebuilt, tp.layers.Dense) and rebuilt.get_config() == layer.get_config()

    class UnregisteredScale(tp.layers.Layer):
        pass

    with pytest.raises(ValueError, match="UnregisteredScale"):
        tp.utils.deserialize_keras_object({"class_name": "UnregisteredScale", "config": {"name": "s"}})
    assert isinstance(
        tp.utils.deserialize_keras_object(
            {"class_name": "UnregisteredScale", "config": {}}, {"UnregisteredScale": UnregisteredScale}
        ),
        UnregisteredScale,
    )
    with tp.utils.custom_object_scope({"UnregisteredScale": UnregisteredScale}):
        assert isinstance(
            tp.utils.deserialize_keras_object({"class_name": "UnregisteredScale", "config": {}}), UnregisteredScale
        )


def test_backend_settings_match_keras():
    assert tp.backend.backend() == "tapeflow"
    assert tp.backend.epsilon() == keras.backend.epsilon()
    assert tp.backend.floatx() == keras.backend.floatx()
    assert tp.backend.image_data_format() == keras.backend.image_data_format()
    assert tp.backend.is_keras_tensor(tp.Input((2,))) and not tp.backend.is_keras_tensor(np.zeros(2))
    tp.backend.set_floatx("float64")
    try:
        assert tp.layers.Dense(2)(tp.ones((1, 3), dtype="float64")).dtype == tp.float64
    finally:
        tp.backend.set_floatx("float32")
    with pytest.raises(ValueError, match="set_floatx"):
        tp.backend.set_floatx("int8")
    tp.layers.Dense(1, name=None)
    tp.backend.clear_session()
    assert tp.layers.Dense(1).name == "dense"


def test_utils_reexport_the_trainer_and_data_names():
    x, y = tp.utils.unpack_x_y_sample_weight(tp.utils.pack_x_y_sample_weight(1, 2))[:2]
    assert (x, y) == (1, 2)
    assert tp.utils.Sequence is tp.utils.PyDataset


def test_plot_model_writes_a_file(tmp_path):
    pytest.importorskip("pydot")
    if shutil.which("dot") is None:
        pytest.skip("Graphviz's dot is not installed (make data installs it)")
    inputs = tp.Input((4,), name="features")
    hidden = tp.layers.Dense(3, name="hidden")(inputs)
    outputs = tp.layers.Concatenate(name="join")([hidden, tp.layers.Dense(2, name="side")(inputs)])
    model = tp.Model(inputs, outputs)
    dot = tp.utils.model_to_dot(model, show_shapes=True)
    names = sorted(n.get_label() for n in dot.get_nodes() if n.get_label())
    assert len(dot.get_edges()) == 4 and any("join (Concatenate)" in n and "(None, 5)" in n for n in names)
    tp.utils.plot_model(model, to_file=tmp_path / "model.png", show_shapes=True)
    assert (tmp_path / "model.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    sequential = tp.Sequential([tp.Input((2,)), tp.layers.Dense(1)])
    tp.utils.plot_model(sequential, to_file=str(tmp_path / "seq.svg"))
    assert (tmp_path / "seq.svg").read_text().lstrip().startswith("<?xml")


def test_plot_model_says_what_to_install(monkeypatch):
    monkeypatch.setattr(shutil, "which", lambda name: None)
    model = tp.Sequential([tp.Input((2,)), tp.layers.Dense(1)])
    with pytest.raises(ImportError, match="Graphviz"):
        tp.utils.plot_model(model)
