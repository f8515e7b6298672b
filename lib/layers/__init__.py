"""Keras-style layers: config in `__init__`, weights in `build`, math in `call`.

Images are NHWC; sequences are [batch, time, features].

>>> import tapeflow as tp
>>> x = tp.layers.Input(shape=(28, 28, 1))
>>> y = tp.layers.Conv2D(8, 3, padding="same", activation="relu")(x)
>>> tp.layers.Flatten()(tp.layers.MaxPooling2D()(y)).shape
(None, 1568)
"""

from tapeflow.layers.activations import ELU, LeakyReLU, PReLU, ReLU, Softmax
from tapeflow.layers.attention import (
    AdditiveAttention,
    Attention,
    GroupedQueryAttention,
    GroupQueryAttention,
    MultiHeadAttention,
)
from tapeflow.layers.audio import MelSpectrogram, STFTSpectrogram
from tapeflow.layers.augmentation import (
    AugMix,
    AutoContrast,
    CutMix,
    Equalization,
    MaxNumBoundingBoxes,
    MixUp,
    Pipeline,
    RandAugment,
    RandomBrightness,
    RandomColorDegeneration,
    RandomColorJitter,
    RandomContrast,
    RandomCrop,
    RandomElasticTransform,
    RandomErasing,
    RandomFlip,
    RandomGaussianBlur,
    RandomGrayscale,
    RandomHue,
    RandomInvert,
    RandomPerspective,
    RandomPosterization,
    RandomRotation,
    RandomSaturation,
    RandomSharpness,
    RandomShear,
    RandomTranslation,
    RandomZoom,
    Solarization,
)
from tapeflow.layers.base import Input, InputLayer, InputSpec, Layer, SymbolicTensor, deserialize, serialize
from tapeflow.layers.clahe import ContrastLimitedAdaptiveHistogramEqualization
from tapeflow.layers.conv import (
    Conv1D,
    Conv1DTranspose,
    Conv2D,
    Conv2DTranspose,
    Convolution1D,
    Convolution1DTranspose,
    Convolution2D,
    Convolution2DTranspose,
)
from tapeflow.layers.conv3d import Conv3D, Conv3DTranspose, Convolution3D, Convolution3DTranspose
from tapeflow.layers.conv_lstm import ConvLSTM1D, ConvLSTM2D, ConvLSTM3D
from tapeflow.layers.core import Activation, Dense, Dropout, Flatten, Reshape, get_activation
from tapeflow.layers.einsum_dense import EinsumDense
from tapeflow.layers.embedding import Embedding
from tapeflow.layers.lambda_layer import Identity, Lambda
from tapeflow.layers.left_out import (
    FlaxLayer,
    HashedCrossing,
    Hashing,
    JaxLayer,
    StringLookup,
    TextVectorization,
    TFSMLayer,
    TorchModuleWrapper,
)
from tapeflow.layers.masking import Masking
from tapeflow.layers.merge import (
    Add,
    Average,
    Concatenate,
    Dot,
    Maximum,
    Minimum,
    Multiply,
    Subtract,
    add,
    average,
    concatenate,
    dot,
    maximum,
    minimum,
    multiply,
    subtract,
)
from tapeflow.layers.normalization import (
    BatchNormalization,
    GroupNormalization,
    LayerNormalization,
    RMSNormalization,
    UnitNormalization,
)
from tapeflow.layers.pooling import (
    AveragePooling1D,
    AveragePooling2D,
    AvgPool1D,
    AvgPool2D,
    GlobalAveragePooling1D,
    GlobalAveragePooling2D,
    GlobalAvgPool1D,
    GlobalAvgPool2D,
    GlobalMaxPool1D,
    GlobalMaxPool2D,
    GlobalMaxPooling1D,
    GlobalMaxPooling2D,
    MaxPool1D,
    MaxPool2D,
    MaxPooling1D,
    MaxPooling2D,
)
from tapeflow.layers.pooling3d import (
    AdaptiveAveragePooling1D,
    AdaptiveAveragePooling2D,
    AdaptiveAveragePooling3D,
    AdaptiveMaxPooling1D,
    AdaptiveMaxPooling2D,
    AdaptiveMaxPooling3D,
    AveragePooling3D,
    AvgPool3D,
    GlobalAveragePooling3D,
    GlobalAvgPool3D,
    GlobalMaxPool3D,
    GlobalMaxPooling3D,
    MaxPool3D,
    MaxPooling3D,
)
from tapeflow.layers.preprocessing import (
    CategoryEncoding,
    CenterCrop,
    Discretization,
    IntegerLookup,
    Normalization,
    Rescaling,
    Resizing,
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
from tapeflow.layers.regularization import (
    ActivityRegularization,
    AlphaDropout,
    GaussianDropout,
    GaussianNoise,
    SpatialDropout1D,
    SpatialDropout2D,
    SpatialDropout3D,
)
from tapeflow.layers.reshaping import (
    Cropping1D,
    Cropping2D,
    Cropping3D,
    Permute,
    RepeatVector,
    UpSampling1D,
    UpSampling2D,
    UpSampling3D,
    ZeroPadding1D,
    ZeroPadding2D,
    ZeroPadding3D,
)
from tapeflow.layers.reversible_embedding import ReversibleEmbedding
from tapeflow.layers.rnn_wrappers import Bidirectional
from tapeflow.layers.separable_conv import (
    DepthwiseConv1D,
    DepthwiseConv2D,
    SeparableConv1D,
    SeparableConv2D,
    SeparableConvolution1D,
    SeparableConvolution2D,
)
from tapeflow.layers.wrappers import SpectralNormalization, TimeDistributed, Wrapper

__all__ = [name for name in dir() if not name.startswith("_")]
