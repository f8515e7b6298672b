"""tapeflow's Keras namespaces against Keras 3's own, read from the installed keras: every
public name exists in tapeflow unless it is on the documented left-out list, and every layer
made with the same arguments in both has a config with Keras's keys."""

import inspect
import os
import sys
import types
from pathlib import Path

os.environ.setdefault("KERAS_BACKEND", "torch")

import pytest  # noqa: E402

sys.path.insert(0, str(Path(__file__).parent / "layers"))
from keras_arguments import required_arguments  # noqa: E402

import tapeflow as tp  # noqa: E402

keras = pytest.importorskip("keras")

# Left out, each with an error that says why (README "Differences from Keras").
LEFT_OUT = {
    "layers": {
        # wrappers of other frameworks
        "TFSMLayer",
        "JaxLayer",
        "FlaxLayer",
        "TorchModuleWrapper",
        # string tensors, which tapeflow does not have
        "TextVectorization",
        "StringLookup",
        "Hashing",
        "HashedCrossing",
    },
    "callbacks": {"OrbaxCheckpoint"},  # Orbax is JAX's checkpoint library
}
# Names not there yet (the catalogue is being completed); each one listed here is a gap.
NOT_YET: dict[str, set[str]] = {}


def _namespaces():
    import keras.src.ops.math as keras_math  # lazily: keras.ops has no `math` attribute

    pairs = {
        "layers": (keras.layers, tp.layers),
        "ops": (keras.ops, tp.ops),
        "ops.nn": (keras.ops.nn, tp.ops.nn),
        "ops.numpy": (keras.ops.numpy, getattr(tp.ops, "numpy", None)),
        "ops.linalg": (keras.ops.linalg, getattr(tp.ops, "linalg", None)),
        "ops.image": (keras.ops.image, getattr(tp.ops, "image", None)),
        "ops.math": (keras_math, tp.ops.math),
        "activations": (keras.activations, tp.activations),
        "losses": (keras.losses, tp.losses),
        "metrics": (keras.metrics, tp.metrics),
        "optimizers": (keras.optimizers, tp.optimizers),
        "schedules": (keras.optimizers.schedules, tp.optimizers.schedules),
        "callbacks": (keras.callbacks, tp.callbacks),
        "initializers": (keras.initializers, tp.initializers),
        "regularizers": (keras.regularizers, tp.regularizers),
        "constraints": (keras.constraints, getattr(tp, "constraints", None)),
        "random": (keras.random, tp.random),
    }
    return pairs


def _public(module) -> set[str]:
    names = getattr(module, "__all__", None) if module.__name__ == "keras.src.ops.math" else None
    names = names or [n for n in dir(module) if not n.startswith("_")]
    return {n for n in names if not isinstance(getattr(module, n, None), types.ModuleType)}


KERAS_MATH_INTERNALS = {"reduce_shape"}  # a helper of keras.src.ops.math, not an op


@pytest.mark.parametrize("namespace", list(_namespaces()))
def test_every_keras_name_exists_in_tapeflow(namespace):
    theirs, ours = _namespaces()[namespace]
    expected = _public(theirs) - LEFT_OUT.get(namespace, set())
    if namespace == "ops.math":  # keras.src.ops.math's module namespace also holds its classes and imports
        expected = {
            n
            for n in expected
            if inspect.isfunction(getattr(theirs, n)) and getattr(theirs, n).__module__ == theirs.__name__
        } - KERAS_MATH_INTERNALS
    missing = sorted(n for n in expected if ours is None or not hasattr(ours, n))
    assert set(missing) == NOT_YET.get(namespace, set()), f"{namespace}: missing {missing}"


@pytest.mark.parametrize("name", sorted(LEFT_OUT["layers"]))
def test_left_out_layers_say_why(name):
    with pytest.raises(NotImplementedError, match=name):
        getattr(tp.layers, name)()


# Keys of Keras's configs that tapeflow's layers do not take yet.
UNSUPPORTED_KEYS: set[str] = set()
# Keys tapeflow keeps that Keras's config leaves out: Keras's SimpleRNN drops its cell's seed, and
# its RandomGrayscale drops the seed it takes (tapeflow keeps it, so that a clone draws the same).
EXTRA_KEYS = {"SimpleRNN": {"seed"}, "RandomGrayscale": {"seed"}}
# Arguments for layers that Keras's constructor refuses to make with its defaults alone.
EXAMPLE_ARGUMENTS = {
    "CategoryEncoding": {"num_tokens": 4},
    "Discretization": {"bin_boundaries": [0.0, 1.0]},
    "RandomPosterization": {"factor": (1, 4)},
}
# Layers whose arguments are other layers, functions or data: configs are checked by their own tests.
CHECKED_ELSEWHERE = {"Bidirectional", "TimeDistributed", "SpectralNormalization", "Wrapper", "RNN"}
CHECKED_ELSEWHERE |= {"StackedRNNCells", "Lambda", "Pipeline", "Input", "InputLayer", "Layer"}


def _layer_names():
    names = []
    for name in sorted(_public(keras.layers) - LEFT_OUT["layers"] - CHECKED_ELSEWHERE):
        theirs = getattr(keras.layers, name)
        if inspect.isclass(theirs) and issubclass(theirs, keras.layers.Layer) and hasattr(tp.layers, name):
            names.append(name)
    return names


@pytest.mark.parametrize("name", _layer_names())
def test_layer_config_has_keras_keys(name):
    if getattr(tp.layers, name).__module__ == "tapeflow.layers.left_out":
        pytest.skip(f"{name} is left out of tapeflow (it raises, saying why)")
    kwargs = EXAMPLE_ARGUMENTS.get(name) or required_arguments(getattr(tp.layers, name))
    try:
        theirs = getattr(keras.layers, name)(**kwargs).get_config()
    except ImportError as err:  # IntegerLookup: Keras makes it with TensorFlow only
        pytest.skip(f"Keras cannot make {name} here: {err}")
    ours = getattr(tp.layers, name)(**kwargs).get_config()
    missing = set(theirs) - set(ours) - UNSUPPORTED_KEYS
    extra = set(ours) - set(theirs) - EXTRA_KEYS.get(name, set())
    assert not missing and not extra, f"{name}: missing keys {sorted(missing)}, extra keys {sorted(extra)}"
