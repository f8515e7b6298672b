"""Keras-style layers: config in `__init__`, weights in `build`, math in `call`.

Images are NHWC; sequences are [batch, time, features].

>>> import tapeflow as tp
>>> x = tp.layers.Input(shape=(28, 28, 1))
>>> y = tp.layers.Conv2D(8, 3, padding="same", activation="relu")(x)
>>> tp.layers.Flatten()(tp.layers.MaxPooling2D()(y)).shape
(None, 1568)
"""

from tapeflow.layers.base import Input, InputLayer, InputSpec, Layer, SymbolicTensor, deserialize, serialize
from tapeflow.layers.conv import Conv2D, Conv2DTranspose
from tapeflow.layers.core import Activation, Dense, Dropout, Flatten, Reshape, get_activation
from tapeflow.layers.embedding import Embedding
from tapeflow.layers.masking import Masking
from tapeflow.layers.merge import Add, Average, Concatenate, Maximum, Minimum, Multiply, Subtract
from tapeflow.layers.normalization import BatchNormalization, LayerNormalization
from tapeflow.layers.pooling import (
    AveragePooling2D,
    GlobalAveragePooling2D,
    GlobalMaxPooling2D,
    MaxPooling2D,
)
from tapeflow.layers.recurrent import GRU, LSTM, RNN, GRUCell, LSTMCell, SimpleRNN, SimpleRNNCell

__all__ = [name for name in dir() if not name.startswith("_")]
