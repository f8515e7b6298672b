"""`check_layer` cases of the volumetric, depthwise and separable convolutions, the 3-D and
adaptive pooling layers and the reshaping layers (listed in test_layers_check.CASES)."""

from functools import partial

import tapeflow as tp

L = tp.layers
FIRST = "channels_first"

# (id, factory, input shape, check_layer keyword arguments)
CASES = [
    ("conv2d_first", partial(L.Conv2D, 2, (2, 3), strides=2, padding="same", data_format=FIRST), (2, 3, 5, 4), {}),
    ("conv2d_transpose_first", partial(L.Conv2DTranspose, 2, 3, 2, data_format=FIRST), (1, 3, 2, 3), {}),
    ("max_pooling2d_first", partial(L.MaxPooling2D, 2, data_format=FIRST), (2, 3, 4, 5), {}),
    ("average_pooling2d_first", partial(L.AveragePooling2D, 2, 1, "same", FIRST), (2, 2, 3, 4), {}),
    ("conv3d", partial(L.Conv3D, 2, 2, activation="tanh"), (2, 3, 3, 4, 2), {}),
    ("conv3d_same_groups_first", partial(L.Conv3D, 4, (2, 3, 2), 2, "same", FIRST, groups=2), (1, 4, 3, 3, 4), {}),
    ("conv3d_transpose", partial(L.Conv3DTranspose, 2, 2, strides=2), (1, 2, 2, 3, 2), {}),
    ("conv3d_transpose_same_first", partial(L.Conv3DTranspose, 2, 3, 2, "same", FIRST), (1, 2, 2, 2, 3), {}),
    ("depthwise_conv1d", partial(L.DepthwiseConv1D, 3, depth_multiplier=2), (2, 6, 2), {}),
    ("depthwise_conv2d_first", partial(L.DepthwiseConv2D, 2, 2, "same", data_format=FIRST), (2, 3, 4, 5), {}),
    ("separable_conv1d", partial(L.SeparableConv1D, 3, 2, padding="same", data_format=FIRST), (2, 2, 5), {}),
    ("separable_conv2d", partial(L.SeparableConv2D, 3, 3, depth_multiplier=2, activation="tanh"), (2, 4, 5, 2), {}),
    ("max_pooling3d", partial(L.MaxPooling3D, (2, 2, 1)), (2, 4, 3, 2, 2), {}),
    ("max_pooling3d_same_first", partial(L.MaxPooling3D, 3, 2, "same", FIRST), (1, 2, 3, 4, 3), {}),
    ("average_pooling3d", partial(L.AveragePooling3D, 2, 1), (2, 3, 3, 2, 2), {}),
    ("average_pooling3d_same", partial(L.AveragePooling3D, (2, 3, 2), padding="same"), (1, 3, 4, 3, 2), {}),
    ("global_max_pooling3d", L.GlobalMaxPooling3D, (2, 2, 3, 2, 3), {}),
    ("global_average_pooling3d_first", partial(L.GlobalAveragePooling3D, FIRST, True), (2, 3, 2, 3, 2), {}),
    ("adaptive_average_pooling1d", partial(L.AdaptiveAveragePooling1D, 3), (2, 7, 2), {}),
    ("adaptive_max_pooling1d_first", partial(L.AdaptiveMaxPooling1D, 2, FIRST), (2, 2, 5), {}),
    ("adaptive_average_pooling2d_first", partial(L.AdaptiveAveragePooling2D, (2, 3), FIRST), (2, 2, 5, 4), {}),
    ("adaptive_max_pooling2d", partial(L.AdaptiveMaxPooling2D, 2), (2, 5, 3, 2), {}),
    ("adaptive_average_pooling3d", partial(L.AdaptiveAveragePooling3D, 2), (1, 3, 4, 3, 2), {}),
    ("adaptive_max_pooling3d_first", partial(L.AdaptiveMaxPooling3D, (1, 2, 2), FIRST), (1, 2, 3, 5, 3), {}),
    ("up_sampling1d", partial(L.UpSampling1D, 3), (2, 3, 2), {}),
    ("up_sampling2d", partial(L.UpSampling2D, (2, 1), FIRST), (2, 2, 2, 3), {}),
    ("up_sampling2d_bilinear", partial(L.UpSampling2D, 2, interpolation="bilinear"), (1, 2, 3, 2), {}),
    ("up_sampling3d", partial(L.UpSampling3D, (1, 2, 2)), (1, 2, 2, 2, 2), {}),
    ("zero_padding1d", partial(L.ZeroPadding1D, (1, 2)), (2, 3, 2), {}),
    ("zero_padding2d_first", partial(L.ZeroPadding2D, ((1, 0), (0, 2)), FIRST), (2, 2, 3, 2), {}),
    ("zero_padding3d", partial(L.ZeroPadding3D, (1, 0, 1)), (1, 2, 2, 2, 2), {}),
    ("cropping1d", partial(L.Cropping1D, (1, 2)), (2, 5, 2), {}),
    ("cropping2d", partial(L.Cropping2D, ((1, 0), (1, 1))), (2, 3, 4, 2), {}),
    ("cropping3d_first", partial(L.Cropping3D, (1, 0, 1), FIRST), (1, 2, 3, 2, 4), {}),
    ("repeat_vector", partial(L.RepeatVector, 3), (2, 4), {}),
    ("permute", partial(L.Permute, (3, 1, 2)), (2, 3, 4, 2), {}),
    ("conv_lstm1d", partial(L.ConvLSTM1D, 2, 2, padding="same", return_sequences=True), (2, 3, 4, 2), {}),
    ("conv_lstm2d_state_first", partial(L.ConvLSTM2D, 2, 2, data_format=FIRST, return_state=True), (2, 2, 2, 3, 3), {}),
    ("conv_lstm3d_backwards", partial(L.ConvLSTM3D, 2, (1, 2, 2), go_backwards=True), (1, 2, 2, 3, 3, 1), {}),
]
