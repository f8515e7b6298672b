"""`check_layer` cases of the preprocessing, augmentation, normalization, noise, wrapper and
other Keras layers of `tp.layers` (listed in test_layers_check.CASES)."""

from functools import partial

import tapeflow as tp

L = tp.layers


@tp.saving.register_serializable(package="cases_keras_layers")
def doubled_tanh(x):
    return 2.0 * tp.tanh(x)


@tp.saving.register_serializable(package="cases_keras_layers")
class SelfGroupedAttention(L.Layer):
    """GroupedQueryAttention of a tensor on itself: check_layer calls a layer with one input."""

    def __init__(self, causal=False, **kwargs):
        super().__init__(**kwargs)
        self.causal = causal
        self.attention = L.GroupQueryAttention(
            2, 4, 2, name=f"{self.name}/attention", dtype=self.dtype_policy.name, use_gate=True
        )

    def call(self, x, training=None):
        return self.attention(x, x, use_causal_mask=self.causal, training=training)


def _wrapped(cls, inner, dtype, **kwargs):
    return cls(inner(dtype=dtype), dtype=dtype, **kwargs)


PREPROCESSING = [
    ("rescaling", partial(L.Rescaling, 0.5, offset=1.0), (2, 3), {}),
    ("resizing", partial(L.Resizing, 3, 5), (2, 4, 3, 2), {}),
    ("resizing_bicubic", partial(L.Resizing, 5, 2, interpolation="bicubic"), (1, 3, 4, 1), {}),
    ("center_crop", partial(L.CenterCrop, 2, 3), (2, 4, 4, 1), {}),
    ("normalization", partial(L.Normalization, mean=[0.5, 1.0, 2.0], variance=[1.0, 2.0, 3.0]), (4, 3), {}),
    ("discretization", partial(L.Discretization, [-0.5, 0.5]), (3, 4), {"grad": False}),
    ("discretization_count", partial(L.Discretization, [0.0], output_mode="count"), (3, 4), {"grad": False}),
    ("category_encoding", partial(L.CategoryEncoding, 5, output_mode="count"), (3, 4), {"int_range": (0, 5)}),
    ("integer_lookup", partial(L.IntegerLookup, vocabulary=[1, 3, 5]), (3, 4), {"int_range": (0, 6)}),
    (
        "integer_lookup_one_hot",
        partial(L.IntegerLookup, vocabulary=[2, 4], output_mode="one_hot"),
        (3, 1),
        {"int_range": (0, 6)},
    ),
]

AUGMENTATION = [
    ("flip", partial(L.RandomFlip, seed=1), (3, 4, 5, 2), {"training": True}),
    ("rotation", partial(L.RandomRotation, 0.2, seed=1), (2, 5, 4, 2), {"training": True}),
    ("zoom", partial(L.RandomZoom, 0.3, 0.2, seed=1, fill_mode="constant"), (2, 4, 5, 1), {"training": True}),
    ("translation", partial(L.RandomTranslation, 0.3, 0.2, seed=1), (2, 4, 5, 1), {"training": True}),
    ("crop", partial(L.RandomCrop, 3, 2, seed=1), (2, 5, 4, 1), {"training": True}),
    ("crop_inference", partial(L.RandomCrop, 3, 2, seed=1), (2, 5, 4, 1), {}),
    ("contrast", partial(L.RandomContrast, 0.5, value_range=(-9, 9), seed=1), (2, 3, 4, 2), {"training": True}),
    ("brightness", partial(L.RandomBrightness, 0.1, value_range=(-9, 9), seed=1), (2, 3, 4, 2), {"training": True}),
    ("grayscale", partial(L.RandomGrayscale, 0.5, seed=1), (4, 3, 2, 3), {"training": True}),
    ("invert", partial(L.RandomInvert, 0.5, seed=1), (4, 3, 2, 2), {"training": True}),
    (
        "solarization",
        partial(L.Solarization, 0.1, (0.1, 0.2), value_range=(-9, 9), seed=1),
        (2, 3, 2, 1),
        {"training": True},
    ),
    (
        "color_degeneration",
        partial(L.RandomColorDegeneration, 0.5, value_range=(-9, 9), seed=1),
        (2, 3, 2, 3),
        {"training": True},
    ),
    ("shear", partial(L.RandomShear, 0.3, 0.3, seed=1), (2, 4, 5, 1), {"training": True}),
    ("perspective", partial(L.RandomPerspective, scale=0.3, seed=1), (2, 4, 5, 1), {"training": True}),
    ("erasing", partial(L.RandomErasing, seed=1), (2, 4, 5, 1), {"training": True}),
    ("equalization", partial(L.Equalization, value_range=(-9, 9)), (2, 3, 4, 2), {"training": True, "grad": False}),
    ("gaussian_blur", partial(L.RandomGaussianBlur, value_range=(-9, 9), seed=1), (2, 4, 5, 2), {"training": True}),
    ("sharpness", partial(L.RandomSharpness, 0.8, value_range=(-9, 9), seed=1), (2, 4, 5, 2), {"training": True}),
    ("posterization", partial(L.RandomPosterization, 4, seed=1), (2, 3, 3, 1), {"training": True, "grad": False}),
    ("hue", partial(L.RandomHue, 0.5, value_range=(-9, 9), seed=1), (2, 2, 3, 3), {"training": True}),
    ("saturation", partial(L.RandomSaturation, 0.5, seed=1), (2, 2, 3, 3), {"training": True}),
    ("color_jitter", partial(L.RandomColorJitter, (-9, 9), 0.1, 0.2, seed=1), (2, 2, 3, 3), {"training": True}),
    ("auto_contrast", partial(L.AutoContrast, value_range=(-2, 2)), (2, 3, 4, 2), {}),
    (
        "pipeline",
        lambda dtype: L.Pipeline([L.RandomFlip(seed=1, dtype=dtype), L.Rescaling(2.0, dtype=dtype)], dtype=dtype),
        (2, 3, 4, 2),
        {"training": True},
    ),
    ("mix_up", partial(L.MixUp, 0.4, seed=1), (3, 4, 5, 2), {"training": True}),
    ("cut_mix", partial(L.CutMix, seed=1), (3, 4, 5, 2), {"training": True}),
    ("rand_augment_inference", partial(L.RandAugment, seed=1), (2, 4, 5, 3), {}),
    ("aug_mix_inference", partial(L.AugMix, seed=1), (2, 4, 5, 3), {}),
    (
        "elastic_transform",
        partial(L.RandomElasticTransform, value_range=(-9, 9), seed=1),
        (2, 6, 5, 2),
        {"training": True},
    ),
    ("max_num_bounding_boxes_images", partial(L.MaxNumBoundingBoxes, 3), (2, 4, 5, 3), {}),
]

MISC = [
    ("group_norm", partial(L.GroupNormalization, 2), (2, 3, 4), {}),
    ("group_norm_axis1", partial(L.GroupNormalization, 3, axis=1, scale=False), (2, 3, 2), {}),
    ("rms_norm", partial(L.RMSNormalization, axis=[1, 2]), (2, 3, 4), {}),
    ("unit_norm", L.UnitNormalization, (3, 4), {}),
    ("identity", L.Identity, (2, 3), {}),
    ("gaussian_noise", partial(L.GaussianNoise, 0.3, seed=2), (3, 4), {"training": True}),
    ("gaussian_dropout", partial(L.GaussianDropout, 0.3, seed=2), (3, 4), {"training": True}),
    ("alpha_dropout", partial(L.AlphaDropout, 0.3, seed=2), (3, 4), {"training": True}),
    ("spatial_dropout1d", partial(L.SpatialDropout1D, 0.4, seed=2), (3, 4, 5), {"training": True}),
    ("spatial_dropout2d", partial(L.SpatialDropout2D, 0.4, seed=2), (2, 3, 2, 4), {"training": True}),
    (
        "spatial_dropout3d_first",
        partial(L.SpatialDropout3D, 0.4, "channels_first", 2),
        (2, 3, 2, 2, 2),
        {"training": True},
    ),
    ("activity_regularization", partial(L.ActivityRegularization, 0.1, 0.1), (3, 4), {}),
    (
        "time_distributed",
        lambda dtype: _wrapped(L.TimeDistributed, partial(L.Dense, 2, activation="tanh"), dtype),
        (2, 3, 4),
        {},
    ),
    (
        "spectral_norm",
        lambda dtype: _wrapped(L.SpectralNormalization, partial(L.Dense, 2), dtype),
        (3, 4),
        {},
    ),
    ("wrapper", lambda dtype: _wrapped(L.Wrapper, partial(L.Dense, 2), dtype), (3, 4), {}),
    ("lambda", partial(L.Lambda, doubled_tanh), (3, 4), {}),
    ("dot", partial(L.Dot, (2, 1)), [(2, 3, 4), (2, 4, 2)], {}),
    ("dot_normalize", partial(L.Dot, 1, normalize=True), [(3, 4), (3, 4)], {}),
    ("einsum_dense", partial(L.EinsumDense, "abc,cde->abde", (3, 2, 4), bias_axes="e"), (2, 3, 5), {}),
    ("einsum_dense_ellipsis", partial(L.EinsumDense, "...b,bc->...c", 4, activation="relu"), (2, 3, 5), {}),
    ("reversible_embedding", partial(L.ReversibleEmbedding, 6, 3, tie_weights=False), (2, 4), {"int_range": (0, 6)}),
    ("grouped_query_attention", SelfGroupedAttention, (2, 3, 4), {}),
    ("grouped_query_attention_causal", partial(SelfGroupedAttention, causal=True), (2, 3, 4), {}),
    ("stft_spectrogram", partial(L.STFTSpectrogram, frame_length=8, frame_step=3), (2, 20, 2), {}),
    (
        "stft_spectrogram_psd_first",
        partial(L.STFTSpectrogram, "psd", 6, 4, 8, padding="same", data_format="channels_first", expand_dims=True),
        (2, 2, 17),
        {},
    ),
    ("mel_spectrogram", partial(L.MelSpectrogram, 32, 8, num_mel_bins=6, sampling_rate=8000), (2, 40), {}),
]

# (id, factory, input shape, check_layer keyword arguments)
CASES = [*PREPROCESSING, *AUGMENTATION, *MISC]
