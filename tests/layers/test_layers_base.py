"""The Layer lifecycle: names, lazy build, weight tracking in nested layers, freezing,
regularization losses, weights and configs, symbolic inputs and the training flag."""

import json

import numpy as np
import pytest
from layer_check import check_layer

import tapeflow as tp

L = tp.layers


@tp.saving.register_serializable(package="tests")
class ProbeLayer(L.Layer):
    """A layer with one weight of each kind, to watch the base class at work."""

    def build(self, input_shape):
        self.scale = self.add_weight("scale", (input_shape[-1],), "ones", regularizer=lambda w: tp.sum(w))
        self.count = self.add_weight("count", (), "zeros", trainable=False)

    def call(self, inputs):
        return inputs * self.scale

    def compute_output_shape(self, input_shape):
        return tuple(input_shape)


class Block(L.Layer):
    """Layers held in an attribute, a list and a dict, plus a weight of its own."""

    def __init__(self, **kwargs):
        super().__init__(**kwargs)
        self.first = L.Dense(4, name=f"{self.name}_first")
        self.stack = [L.Dense(3, name=f"{self.name}_s0"), L.BatchNormalization(name=f"{self.name}_bn")]
        self.heads = {"out": L.Dense(2, name=f"{self.name}_out")}

    def build(self, input_shape):
        self.offset = self.add_weight("offset", (2,), "zeros")

    def call(self, inputs):
        x = self.first(inputs)
        for layer in self.stack:
            x = layer(x)
        return self.heads["out"](x) + self.offset


def test_auto_names_are_unique_per_class():
    names = [ProbeLayer().name for _ in range(3)]
    assert names[1:] == [f"{names[0]}_1", f"{names[0]}_2"] and names[0].startswith("probe_layer")
    assert ProbeLayer(name="mine").name == "mine"
    assert L.Conv2DTranspose(2, 3).name.startswith("conv2d_transpose")
    assert L.BatchNormalization().name.startswith("batch_normalization")


def test_build_is_lazy_and_names_weights():
    layer = ProbeLayer(name="probe")
    assert not layer.built and layer.weights == []
    y = layer(tp.ones((2, 3)))
    assert layer.built and y.shape == (2, 3)
    assert [w.name for w in layer.weights] == ["probe/scale", "probe/count"]
    assert [w.name for w in layer.trainable_weights] == ["probe/scale"]
    assert [w.name for w in layer.non_trainable_weights] == ["probe/count"]
    assert isinstance(layer.scale, tp.Variable)


def test_build_directly_marks_built_and_compute_output_shape_does_not_build():
    dense = L.Dense(3)
    assert dense.compute_output_shape((None, 7)) == (None, 3) and not dense.built
    dense.build((None, 7))
    assert dense.built and dense.kernel.shape == (7, 3) and dense.count_params() == 24


def test_compute_output_shape_traces_call_and_leaves_the_layer_untouched():
    block = Block(name="traced")  # no compute_output_shape of its own
    stack = block.stack
    draws = str(tp.random.global_generator().get_state())
    names = dict(L.base._NAME_COUNTS)
    assert block.compute_output_shape((None, 6)) == (None, 2)
    assert block.compute_output_shape((5, 6)) == (5, 2)
    assert not any(layer.built for layer in block._flatten_layers()) and block.weights == []
    assert block.stack is stack and len(stack) == 2 and not hasattr(block, "offset")
    assert str(tp.random.global_generator().get_state()) == draws and dict(L.base._NAME_COUNTS) == names
    with pytest.raises(ValueError, match=r"^traced_first: expected input of rank >= 2"):
        block.compute_output_shape((6,))

    block(tp.ones((3, 6)))
    before = block.get_weights()
    assert block.compute_output_shape((None, 6)) == (None, 2)
    for a, b in zip(block.get_weights(), before, strict=True):
        np.testing.assert_array_equal(a, b)


def test_nested_layers_answer_with_their_own_compute_output_shape():
    class Encoder(L.Layer):  # the LSTM unrolls its steps, so an unknown count is answered by its own rule
        def __init__(self, **kwargs):
            super().__init__(**kwargs)
            self.embed = L.Embedding(10, 4)
            self.rnn = L.LSTM(3, return_state=True)

        def call(self, ids):
            out, h, c = self.rnn(self.embed(ids))
            return [out, h + c]

    encoder = Encoder()
    assert encoder.compute_output_shape((None, None)) == [(None, 3), (None, 3)]
    assert [t.shape for t in encoder(L.Input((None,), dtype="int64"))] == [(None, 3), (None, 3)]


def test_conv_and_pooling_shapes_with_unknown_image_sizes():
    x = L.Input((None, 128, 3))
    h = L.MaxPooling2D()(L.Conv2D(4, 3)(x))
    assert h.shape == (None, None, 63, 4)
    assert L.Conv2DTranspose(2, 3, strides=2)(h).shape == (None, None, 127, 2)


def test_nested_layers_are_tracked_in_keras_order():
    block = Block(name="blk")
    block(tp.ones((5, 6)))
    names = [w.name for w in block.weights]
    assert names == [
        "blk/offset",
        "blk_first/kernel",
        "blk_first/bias",
        "blk_s0/kernel",
        "blk_s0/bias",
        "blk_bn/gamma",
        "blk_bn/beta",
        "blk_bn/moving_mean",
        "blk_bn/moving_variance",
        "blk_out/kernel",
        "blk_out/bias",
    ]
    assert [layer.name for layer in block._flatten_layers()] == ["blk", "blk_first", "blk_s0", "blk_bn", "blk_out"]
    assert len(block.trainable_weights) == 9 and len(block.non_trainable_weights) == 2
    assert block.count_params() == 2 + (6 * 4 + 4) + (4 * 3 + 3) + 4 * 3 + (3 * 2 + 2)


def test_get_and_set_weights_round_trip_nested():
    block = Block()
    x = tp.tensor(np.random.default_rng(0).normal(size=(5, 6)).astype("float32"))
    y = block(x)
    other = Block()
    other(x)
    other.set_weights(block.get_weights())
    np.testing.assert_array_equal(other(x).numpy(), y.numpy())
    values = block.get_weights()
    values[0][...] = 99.0  # get_weights returns copies
    assert float(tp.max(block.offset)) == 0.0


def test_trainable_false_freezes_weights_and_nested_layers():
    block = Block()
    block(tp.ones((2, 6)))
    block.trainable = False
    assert block.trainable_weights == [] and len(block.non_trainable_weights) == 11
    assert all(not layer.trainable for layer in block._flatten_layers())
    with tp.GradientTape() as tape:  # frozen weights are not watched
        loss = tp.sum(block(tp.ones((2, 6))))
    assert tape.gradient(loss, block.weights[0]) is None
    block.trainable = True
    assert len(block.trainable_weights) == 9  # the moving statistics stay non-trainable


def test_layer_created_frozen_builds_frozen_weights():
    dense = L.Dense(2, trainable=False)
    dense(tp.ones((1, 3)))
    assert dense.trainable_weights == [] and len(dense.non_trainable_weights) == 2


def test_frozen_batch_norm_runs_in_inference_mode():
    bn = L.BatchNormalization(trainable=False)
    x = tp.tensor([[1.0], [3.0]])
    np.testing.assert_allclose(bn(x, training=True).numpy(), x.numpy() / np.sqrt(1.001), rtol=1e-6)
    assert bn.moving_mean.numpy().tolist() == [0.0]


def test_losses_collect_regularizers_of_nested_trainable_weights():
    dense = L.Dense(2, kernel_regularizer=lambda w: 0.5 * tp.sum(w * w), kernel_initializer="ones")
    probe = ProbeLayer()

    class Outer(L.Layer):
        def __init__(self):
            super().__init__()
            self.parts = [dense, probe]

        def call(self, x):
            return self.parts[1](self.parts[0](x))

    outer = Outer()
    outer(tp.ones((1, 3)))
    assert [float(loss) for loss in outer.losses] == [3.0, 2.0]
    with tp.GradientTape() as tape:  # the losses are differentiable in the weights
        total = tp.sum(outer.losses[0])
    np.testing.assert_allclose(tape.gradient(total, dense.kernel).numpy(), np.ones((3, 2)))
    probe.trainable = False
    assert [float(loss) for loss in outer.losses] == [3.0]


def test_named_regularizer_from_tp_regularizers():
    dense = L.Dense(2, kernel_regularizer="l2", kernel_initializer="ones")
    dense(tp.ones((1, 3)))
    (loss,) = dense.losses
    assert loss.shape == () and float(loss) > 0


def test_numpy_inputs_are_converted_to_the_layer_dtype():
    dense = L.Dense(2)
    assert dense(np.ones((3, 4))).dtype == tp.float32
    dense64 = L.Dense(2, dtype="float64")
    assert dense64(tp.ones((3, 4))).dtype == tp.float64 and dense64.kernel.dtype == tp.float64


def test_training_flag_is_inherited_by_nested_calls():
    class Wrapper(L.Layer):
        def __init__(self):
            super().__init__()
            self.drop = L.Dropout(0.5, seed=3)

        def call(self, x):
            return self.drop(x)  # no training argument: inherits the outer call's

    wrapper = Wrapper()
    x = tp.ones((50,))
    assert np.all(wrapper(x).numpy() == 1.0)
    assert np.any(wrapper(x, training=True).numpy() == 0.0)
    assert np.all(wrapper(x).numpy() == 1.0)


def test_dropout_streams_are_reproducible_from_seed():
    a, b = L.Dropout(0.5, seed=7), L.Dropout(0.5, seed=7)
    x = tp.ones((4, 8))
    np.testing.assert_array_equal(a(x, training=True).numpy(), b(x, training=True).numpy())
    np.testing.assert_array_equal(a(x, training=True).numpy(), b(x, training=True).numpy())


def test_dropout_noise_shape_shares_the_mask_across_an_axis():
    y = L.Dropout(0.5, noise_shape=(None, 1), seed=0)(tp.ones((20, 6)), training=True).numpy()
    assert all(len(set(row.tolist())) == 1 for row in y)


def test_input_is_a_symbolic_placeholder_that_layers_consume():
    x = L.Input(shape=(28, 28, 1), name="image")
    assert x.shape == (None, 28, 28, 1) and x.dtype == tp.float32 and x.name == "image"
    conv = L.Conv2D(4, 3, strides=2, padding="same")
    h = conv(x)
    assert conv.built and h.shape == (None, 14, 14, 4) and h.history[0] is conv and h.history[1] == (x,)
    h = L.Flatten()(L.MaxPooling2D()(h))
    assert h.shape == (None, 196)
    ids = L.Input(shape=(None,), dtype="int64", batch_size=8)
    seq = L.Embedding(10, 4)(ids)
    out, state_h, state_c = L.LSTM(5, return_sequences=True, return_state=True)(seq)
    assert (seq.shape, out.shape, state_h.shape, state_c.shape) == ((8, None, 4), (8, None, 5), (8, 5), (8, 5))
    merged = L.Concatenate()([L.Dense(3)(L.Input((7,))), L.Input((2,))])
    assert merged.shape == (None, 5)


def test_symbolic_call_checks_rank():
    with pytest.raises(ValueError, match=r"expected input of rank 4, got shape \(None, 5\)"):
        L.Conv2D(2, 3)(L.Input((5,)))


def test_config_round_trips_through_json_with_initializer_objects():
    dense = L.Dense(3, kernel_initializer=tp.initializers.Constant(0.5), activation="relu", name="d")
    config = json.loads(json.dumps(dense.get_config()))
    clone = L.Dense.from_config(config)
    clone(tp.ones((1, 2)))
    np.testing.assert_array_equal(clone.kernel.numpy(), np.full((2, 3), 0.5, np.float32))
    assert clone.get_config()["activation"] == "relu"


def test_callable_activation_is_kept_in_config():
    def swish(x):
        return x * tp.sigmoid(x)

    layer = L.Activation(swish)
    assert layer.get_config()["activation"] is swish
    assert L.Activation.from_config(layer.get_config()).activation is swish


def test_custom_layer_passes_check_layer():
    check_layer(ProbeLayer, (3, 4))


def test_check_layer_catches_a_wrong_gradient():
    class Wrong(L.Layer):
        def build(self, input_shape):
            self.w = self.add_weight("w", (input_shape[-1],), "ones")

        def call(self, x):
            return x * tp.stop_gradient(self.w) + self.w  # true gradient is x + 1, tape sees 1

        def compute_output_shape(self, input_shape):
            return tuple(input_shape)

    with pytest.raises(AssertionError, match="gradient of"):
        check_layer(Wrong, (3, 4))


def test_activation_names():
    x = tp.tensor([-1.0, 0.5])
    for name in ("relu", "sigmoid", "tanh", "softmax", "gelu", "elu", "leaky_relu", "softplus", "linear"):
        assert L.Activation(name)(x).shape == (2,)
    np.testing.assert_allclose(L.Activation("leaky_relu")(x).numpy(), [-0.2, 0.5], rtol=1e-6)
    np.testing.assert_array_equal(L.Activation("linear")(x).numpy(), x.numpy())
