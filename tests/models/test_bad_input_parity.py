"""Bad input raises what Keras 3 raises (the same exception type), with a message that names
the layer or function and the offending value. Where tapeflow differs on purpose (it refuses
earlier, or raises a more precise type), the case says so; README "Differences from Keras"
lists them."""

import os

os.environ.setdefault("KERAS_BACKEND", "torch")

import numpy as np  # noqa: E402
import pytest  # noqa: E402

import tapeflow as tp  # noqa: E402

keras = pytest.importorskip("keras")

X = np.ones((4, 3), "float32")


def _mlp(lib):
    return lib.Sequential([lib.Input((3,)), lib.layers.Dense(3, name="head")])


def _call_twice(lib):
    layer = lib.layers.Dense(2, name="twice")
    layer(np.ones((2, 3), "float32"))
    layer(np.ones((2, 4), "float32"))


def _fit_uncompiled(lib):
    _mlp(lib).fit(X, X, verbose=0)


def _fit_lengths(lib):
    model = _mlp(lib)
    model.compile("sgd", "mse")
    model.fit(X, X[:3], verbose=0)


def _unknown_metric(lib):
    model = _mlp(lib)
    model.compile("sgd", "mse", metrics=["no_such_metric"])
    model.fit(X, X, verbose=0)


def _set_weights(lib, arrays):
    layer = lib.layers.Dense(2, name="target")
    layer.build((None, 3))
    layer.set_weights(arrays)


# (id, the call on a library, the exception type both raise, words tapeflow's message holds)
CASES = [
    ("dense_units", lambda lib: lib.layers.Dense(-1, name="d"), ValueError, ["units", "-1"]),
    ("dense_input_size", _call_twice, ValueError, ["twice", "(2, 4)"]),
    ("dropout_rate", lambda lib: lib.layers.Dropout(1.5), ValueError, ["rate", "1.5"]),
    (
        "conv2d_rank",
        lambda lib: lib.layers.Conv2D(2, 3, name="c")(np.ones((2, 5), "float32")),
        ValueError,
        ["c", "(2, 5)"],
    ),
    ("conv2d_padding", lambda lib: lib.layers.Conv2D(2, 3, padding="full"), ValueError, ["padding", "full"]),
    ("unknown_activation", lambda lib: lib.layers.Dense(2, activation="nope"), ValueError, ["nope"]),
    (
        "unknown_initializer",
        lambda lib: lib.layers.Dense(2, kernel_initializer="nope"),
        ValueError,
        ["kernel_initializer", "nope"],
    ),
    (
        "unknown_regularizer",
        lambda lib: lib.layers.Dense(2, kernel_regularizer="nope"),
        ValueError,
        ["kernel_regularizer", "nope"],
    ),
    ("embedding_dim", lambda lib: lib.layers.Embedding(10, 0), ValueError, ["output_dim", "0"]),
    ("reshape_size", lambda lib: lib.layers.Reshape((5,))(lib.Input((3,))), ValueError, ["reshape", "(5,)"]),
    (
        "concatenate_shapes",
        lambda lib: lib.layers.Concatenate()([lib.Input((3, 2)), lib.Input((4, 2))]),
        ValueError,
        ["concatenate", "(None, 3, 2)", "(None, 4, 2)"],
    ),
    ("add_shapes", lambda lib: lib.layers.Add()([lib.Input((3,)), lib.Input((4,))]), ValueError, ["add", "(None, 4)"]),
    ("lstm_rank", lambda lib: lib.layers.LSTM(2, name="l")(np.ones((2, 3), "float32")), ValueError, ["l", "rank 3"]),
    ("input_shape", lambda lib: lib.Input(shape=(-2,)), ValueError, ["shape", "-2"]),
    ("fit_uncompiled", _fit_uncompiled, ValueError, ["compile"]),
    ("unknown_optimizer", lambda lib: _mlp(lib).compile("nope", "mse"), ValueError, ["nope"]),
    ("unknown_metric", _unknown_metric, ValueError, ["no_such_metric"]),
    ("fit_lengths", _fit_lengths, ValueError, ["4", "3"]),
    (
        "predict_size",
        lambda lib: _mlp(lib).predict(np.ones((2, 4), "float32"), verbose=0),
        ValueError,
        ["head", "(2, 4)"],
    ),
    ("set_weights_count", lambda lib: _set_weights(lib, [np.ones((3, 2))]), ValueError, ["target", "1", "2"]),
    (
        "set_weights_shape",
        lambda lib: _set_weights(lib, [np.ones((3, 3)), np.ones(2)]),
        ValueError,
        ["(3, 2)", "(3, 3)"],
    ),
    ("pool_size", lambda lib: lib.layers.MaxPooling2D(pool_size=0), ValueError, ["pool_size", "0"]),
    ("sequential_add", lambda lib: lib.Sequential().add(3), ValueError, ["Sequential.add", "int"]),
    ("model_outputs", lambda lib: lib.Model(lib.Input((3,)), 3), ValueError, ["outputs", "int"]),
    ("get_layer", lambda lib: _mlp(lib).get_layer("nope"), ValueError, ["nope"]),
    ("learning_rate", lambda lib: lib.optimizers.SGD(learning_rate="x"), ValueError, ["learning_rate", "x"]),
]


@pytest.mark.parametrize("call, error, words", [c[1:] for c in CASES], ids=[c[0] for c in CASES])
def test_bad_input_raises_what_keras_raises(call, error, words):
    with pytest.raises(error):
        call(keras)
    with pytest.raises(error) as raised:
        call(tp)
    for word in words:
        assert word in str(raised.value), f"{word!r} not in {raised.value}"


# Where tapeflow differs on purpose: (id, the call, Keras's outcome, tapeflow's exception type)
DIFFERENCES = [
    # refused at compile rather than at the first fit step
    ("unknown_loss_at_compile", lambda lib: _mlp(lib).compile("sgd", "no_such_loss"), None, ValueError),
    # a negative class id is an error rather than a row of zeros
    ("to_categorical_negative", lambda lib: lib.utils.to_categorical([-1, 2], 3), None, IndexError),
    # a missing file is a FileNotFoundError (an OSError), not a ValueError
    ("load_model_missing", lambda lib: lib.models.load_model("/nonexistent/m.keras"), ValueError, FileNotFoundError),
    # an axis out of range is a ValueError naming the layer, not an IndexError
    (
        "batch_norm_axis",
        lambda lib: lib.layers.BatchNormalization(axis=5)(np.ones((2, 3), "float32")),
        IndexError,
        ValueError,
    ),
]


@pytest.mark.parametrize("call, theirs, ours", [c[1:] for c in DIFFERENCES], ids=[c[0] for c in DIFFERENCES])
def test_documented_differences_from_keras(call, theirs, ours):
    if theirs is None:
        call(keras)
    else:
        with pytest.raises(theirs):
            call(keras)
    with pytest.raises(ours):
        call(tp)
