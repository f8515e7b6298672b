"""The random generators a model's layers own (Dropout's), and their saved states checked.

Training resumes exactly only if every random stream continues where it stopped, so
checkpoints and model files store each generator's state; a state read from a file is
first given to a scratch bit generator of the same kind, which refuses a malformed one.

>>> import tapeflow as tp
>>> model = tp.Sequential([tp.Input((2,)), tp.layers.Dropout(0.5, seed=1, name="drop")])
>>> list(generators_by_name(model)), list(generators_by_path(model))
(['drop/generator'], ['layers/dropout/generator'])
"""

from __future__ import annotations

from tapeflow.ops.random import Generator
from tapeflow.saving.weight_keys import layer_paths


def generators_by_name(model) -> dict[str, Generator]:
    """Every Generator held as an attribute of the model or its layers, as '<layer name>/<attr>'."""
    found = {}
    for layer in model._flatten_layers():
        for attr, value in vars(layer).items():
            if isinstance(value, Generator):
                key = f"{layer.name}/{attr}"
                if key in found and found[key] is not value:
                    raise ValueError(f"checkpoint: two layers named '{layer.name}' both own a random generator")
                found[key] = value
    return found


def generators_by_path(model) -> dict[str, Generator]:
    """Every Generator held as an attribute of the model or its layers, as '<layer path>/<attr>'."""
    return {
        f"{path}/{attr}" if path else attr: value
        for path, layer in layer_paths(model).items()
        for attr, value in vars(layer).items()
        if isinstance(value, Generator)
    }


def checked_state(generator: Generator, state, key: str, where: str) -> dict:
    """`state` once a scratch bit generator of `generator`'s kind has accepted it.

    >>> import tapeflow as tp
    >>> checked_state(tp.random.Generator(0), {"bit_generator": "PCG64"}, "drop/rng", "load")
    Traceback (most recent call last):
    ValueError: load: random state 'drop/rng' is not a valid PCG64 state: 'state'
    """
    scratch = type(generator.numpy.bit_generator)()
    kind = type(scratch).__name__
    try:
        scratch.state = state
    except (TypeError, ValueError, KeyError, OverflowError) as err:
        raise ValueError(f"{where}: random state '{key}' is not a valid {kind} state: {err}") from None
    if not _counts_only(state) or scratch.state != state:  # a bool, a fraction, or a value the generator wraps
        raise ValueError(f"{where}: random state '{key}' is not a valid {kind} state: {state!r:.200}")
    return scratch.state


def _counts_only(state) -> bool:
    """Whether every value of a saved generator state, except its kind's name, is an int >= 0."""
    if isinstance(state, dict):
        return all(isinstance(v, str) if k == "bit_generator" else _counts_only(v) for k, v in state.items())
    return isinstance(state, int) and not isinstance(state, bool) and state >= 0
