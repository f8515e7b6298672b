"""Every public layer documents each constructor argument in a Keras-style Args section,
and names activation, use_bias, initializers and regularizers in its signature, so that
`help(tp.layers.X)` is enough to use it."""

import inspect
import re

import pytest
from keras_arguments import make

import tapeflow as tp

L = tp.layers
PUBLIC = sorted(name for name in dir(L) if inspect.isclass(getattr(L, name)) and issubclass(getattr(L, name), L.Layer))
LEFT_OUT = {name for name in PUBLIC if getattr(L, name).__module__ == "tapeflow.layers.left_out"}  # raise when made


def _documented_args(doc: str) -> set[str]:
    section = re.search(r"\n\s*Args:\n(.*?)(?:\n\s*\n|\Z)", doc, re.S)
    assert section, "no Args section"
    lines = section.group(1).splitlines()
    indent = min(len(line) - len(line.lstrip()) for line in lines if line.strip())
    return {line.strip().split(":", 1)[0] for line in lines if len(line) - len(line.lstrip()) == indent and ":" in line}


@pytest.mark.parametrize("name", PUBLIC)
def test_args_section_names_every_constructor_argument(name):
    cls = getattr(L, name)
    doc = inspect.getdoc(cls)
    params = list(inspect.signature(cls.__init__).parameters.values())[1:]
    expected = {f"**{p.name}" if p.kind is p.VAR_KEYWORD else p.name for p in params}
    documented = _documented_args(doc)
    assert expected <= documented, f"{name}: undocumented {sorted(expected - documented)}"
    assert documented <= expected, f"{name}: documented but not arguments {sorted(documented - expected)}"


EXAMPLES = {
    "Activation": lambda: L.Activation("relu"),
    "Conv1D": lambda: L.Conv1D(2, 3),
    "Conv1DTranspose": lambda: L.Conv1DTranspose(2, 3),
    "Conv2D": lambda: L.Conv2D(2, 3),
    "Conv2DTranspose": lambda: L.Conv2DTranspose(2, 3),
    "Dense": lambda: L.Dense(2),
    "Dropout": lambda: L.Dropout(0.5),
    "Embedding": lambda: L.Embedding(3, 2),
    "GRU": lambda: L.GRU(2),
    "GRUCell": lambda: L.GRUCell(2),
    "InputLayer": lambda: L.InputLayer((2,)),
    "LSTM": lambda: L.LSTM(2),
    "LSTMCell": lambda: L.LSTMCell(2),
    "MultiHeadAttention": lambda: L.MultiHeadAttention(2, 3),
    "RNN": lambda: L.RNN(L.GRUCell(2)),
    "Reshape": lambda: L.Reshape((2,)),
    "SimpleRNN": lambda: L.SimpleRNN(2),
    "SimpleRNNCell": lambda: L.SimpleRNNCell(2),
    "StackedRNNCells": lambda: L.StackedRNNCells([L.GRUCell(2)]),
    "Bidirectional": lambda: L.Bidirectional(L.LSTM(2)),
    "CategoryEncoding": lambda: L.CategoryEncoding(num_tokens=4),
    "Discretization": lambda: L.Discretization(bin_boundaries=[0.0, 1.0]),
    "RandomPosterization": lambda: L.RandomPosterization(factor=(1, 4)),
}
WEIGHT_OPTIONS = re.compile(
    r"^(activation|recurrent_activation|use_bias|unit_forget_bias|\w+_initializer|\w+_regularizer)$"
)


@pytest.mark.parametrize("name", sorted(set(PUBLIC) - LEFT_OUT))
def test_weight_options_are_named_in_the_signature(name):
    cls = getattr(L, name)
    layer = EXAMPLES[name]() if name in EXAMPLES else make(cls)
    params = set(inspect.signature(cls.__init__).parameters)
    options = {attr for attr in vars(layer) if WEIGHT_OPTIONS.match(attr)}
    if name in ("SimpleRNN", "LSTM", "GRU"):  # the options of the cell they make
        options |= {attr for attr in vars(layer.cell) if WEIGHT_OPTIONS.match(attr)}
    options -= {"activity_regularizer"}  # the base Layer's, which every layer takes through **kwargs (as in Keras)
    assert options <= params, f"{name}: {sorted(options - params)} are hidden in **kwargs"


def test_conv_and_pooling_docs_state_the_layout_and_padding_values():
    for cls in (L.Conv2D, L.Conv2DTranspose, L.MaxPooling2D, L.AveragePooling2D):
        doc = inspect.getdoc(cls)
        assert "NHWC" in doc and '"valid"' in doc and '"same"' in doc, cls.__name__
