"""Keras-style layers: config in `__init__`, weights in `build`, math in `call`.

Images are NHWC; sequences are [batch, time, features].

>>> import tapeflow as tp
>>> x = tp.layers.Input(shape=(28, 28, 1))
>>> y = tp.layers.Conv2D(8, 3, padding="same", activation="relu")(x)
>>> tp.layers.Flatten()(tp.layers.MaxPooling2D()(y)).shape
(None, 1568)
"""

from tapeflow.layers.activations import ELU, LeakyReLU, PReLU, ReLU, Softmax
from tapeflow.layers.attention import AdditiveAttention, Attention, MultiHeadAttention
from tapeflow.layers.base import Input, InputLayer, InputSpec, Layer, SymbolicTensor, deserialize, serialize
from tapeflow.layers.conv import Conv1D, Conv1DTranspose, Conv2D, Conv2DTranspose
from tapeflow.layers.core import Activation, Dense, Dropout, Flatten, Reshape, get_activation
from tapeflow.layers.embedding import Embedding
from tapeflow.layers.masking import Masking
from tapeflow.layers.merge import (
    Add,
    Average,
    Concatenate,
    Maximum,
    Minimum,
    Multiply,
    Subtract,
    add,
    average,
    concatenate,
    maximum,
    minimum,
    multiply,
    subtract,
)
from tapeflow.layers.normalization import BatchNormalization, LayerNormalization
from tapeflow.layers.pooling import (
    AveragePooling1D,
    AveragePooling2D,
    GlobalAveragePooling1D,
    GlobalAveragePooling2D,
    GlobalMaxPooling1D,
    GlobalMaxPooling2D,
    MaxPooling1D,
    MaxPooling2D,
)
from tapeflow.layers.recurrent import (
    GRU,
    LSTM,
    RNN,
    GRUCell,
    LSTMCell,
    SimpleRNN,
    SimpleRNNCell,
    StackedRNNCells,
)
from tapeflow.layers.rnn_wrappers import Bidirectional

__all__ = [name for name in dir() if not name.startswith("_")]
