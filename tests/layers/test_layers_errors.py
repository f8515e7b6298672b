"""Bad inputs and bad configurations raise ValueError/TypeError naming the layer and the
offending value, and leave the layer's weights as they were."""

import numpy as np
import pytest

import tapeflow as tp

L = tp.layers


@pytest.mark.parametrize(
    "layer, shape, message",
    [
        (lambda: L.Dense(2, name="dense"), (3,), r"^dense: expected input of rank >= 2, got shape \(3,\)$"),
        (lambda: L.Conv2D(2, 3, name="c"), (2, 5, 5), r"^c: expected input of rank 4, got shape \(2, 5, 5\)$"),
        (lambda: L.Conv2DTranspose(2, 3, name="ct"), (5, 5), r"^ct: expected input of rank 4"),
        (lambda: L.MaxPooling2D(name="p"), (2, 4, 4), r"^p: expected input of rank 4"),
        (lambda: L.GlobalAveragePooling2D(name="g"), (2, 4), r"^g: expected input of rank 4"),
        (lambda: L.LSTM(2, name="rnn"), (2, 3), r"^rnn: expected input of rank 3, got shape \(2, 3\)$"),
        (lambda: L.GRU(2, name="rnn"), (2, 3, 4, 5), r"^rnn: expected input of rank 3"),
    ],
)
def test_wrong_rank_names_the_layer_and_shape(layer, shape, message):
    with pytest.raises(ValueError, match=message):
        layer()(tp.ones(shape))


@pytest.mark.parametrize(
    "make, built_on, bad",
    [
        (lambda: L.Dense(2, name="d"), (4, 3), (4, 5)),
        (lambda: L.Conv2D(2, 3, name="d"), (1, 5, 5, 3), (1, 5, 5, 4)),
        (lambda: L.Conv2DTranspose(2, 3, name="d"), (1, 5, 5, 3), (1, 5, 5, 1)),
        (lambda: L.BatchNormalization(name="d"), (4, 3), (4, 2)),
        (lambda: L.LayerNormalization(name="d"), (4, 3), (4, 6)),
        (lambda: L.LSTM(2, name="d"), (2, 3, 4), (2, 3, 5)),
        (lambda: L.SimpleRNN(2, name="d"), (2, 3, 4), (2, 3, 1)),
    ],
)
def test_wrong_channel_count_after_build(make, built_on, bad):
    layer = make()
    layer(tp.ones(built_on))
    before = layer.get_weights()
    with pytest.raises(ValueError, match=rf"^d: expected axis -?\d of input to have size {built_on[-1]}.*{bad}"):
        layer(tp.ones(bad))
    for a, b in zip(layer.get_weights(), before, strict=True):
        np.testing.assert_array_equal(a, b)


def test_batch_norm_rank_is_fixed_after_build():
    bn = L.BatchNormalization(name="bn")
    bn(tp.ones((4, 3)))
    with pytest.raises(ValueError, match=r"^bn: expected input of rank 2, got shape \(4, 2, 3\)"):
        bn(tp.ones((4, 2, 3)))


@pytest.mark.parametrize("bad_id", [10, -1, 123])
def test_out_of_range_embedding_ids(bad_id):
    emb = L.Embedding(10, 3, name="emb")
    emb(tp.tensor([[0, 9]]))
    with pytest.raises(ValueError, match=rf"^emb: id {bad_id} is out of range \[0, 10\)"):
        emb(tp.tensor([[1, bad_id, 2]]))


def test_merge_layers_need_matching_lists():
    with pytest.raises(ValueError, match=r"^add: expected a list of input tensors"):
        L.Add(name="add")(tp.ones((2, 3)))
    with pytest.raises(ValueError, match=r"^add: expected at least 2 inputs, got 1"):
        L.Add(name="add")([tp.ones((2, 3))])
    with pytest.raises(ValueError, match=r"^add: input shapes \[\(2, 3\), \(2, 4\)\] do not broadcast"):
        L.Add(name="add")([tp.ones((2, 3)), tp.ones((2, 4))])
    with pytest.raises(ValueError, match=r"^sub: expected 2 inputs, got 3"):
        L.Subtract(name="sub")([tp.ones((2, 3))] * 3)
    with pytest.raises(ValueError, match=r"^cat: input shapes .* differ outside the concatenation axis -1"):
        L.Concatenate(name="cat")([tp.ones((2, 3)), tp.ones((3, 3))])
    added = L.Add(name="add")
    added([tp.ones((2, 3)), tp.ones((2, 3))])
    with pytest.raises(ValueError, match="do not broadcast"):  # checked on every call, not only the first
        added([tp.ones((2, 3)), tp.ones((2, 5))])


def test_reshape_and_window_sizes():
    with pytest.raises(ValueError, match=r"^r: cannot reshape input of shape \(2, 7\) to target shape \(2, -1\)"):
        L.Reshape((2, -1), name="r")(tp.ones((2, 7)))
    with pytest.raises(ValueError, match=r"^c: input size 2 is smaller than the window 3"):
        L.Conv2D(1, 3, name="c")(tp.ones((1, 2, 5, 1)))


def test_recurrent_mask_and_initial_state_shapes():
    lstm = L.LSTM(2, name="lstm")
    with pytest.raises(ValueError, match=r"^lstm: mask must have shape \(2, 3\) \(batch, time\), got \(2, 4\)"):
        lstm(tp.ones((2, 3, 1)), mask=np.ones((2, 4), bool))
    with pytest.raises(ValueError, match=r"^lstm: initial_state must be 2 tensors of shapes \[\(2, 2\), \(2, 2\)\]"):
        lstm(tp.ones((2, 3, 1)), initial_state=[tp.zeros((2, 2))])


@pytest.mark.parametrize(
    "make, error, message",
    [
        (lambda: L.Dense(0, name="x"), ValueError, r"^x: units must be a positive integer \(at most \d+\), got 0"),
        (lambda: L.Conv2D(2, 3, padding="full", name="x"), ValueError, r"^x: padding must be 'valid' or 'same'"),
        (lambda: L.Conv2D(3, 3, groups=2, name="x"), ValueError, r"^x: groups must be a positive divisor"),
        (lambda: L.Conv2D(2, (3, 3, 3), name="x"), ValueError, r"^x: kernel_size must be a positive int"),
        (lambda: L.Dropout(1.0, name="x"), ValueError, r"^x: rate must be in \[0, 1\)"),
        (lambda: L.Dense(2, activation="swishy"), ValueError, r"unknown activation 'swishy'"),
        (lambda: L.Dense(2, bogus=1), TypeError, r"Dense: unexpected keyword arguments \['bogus'\]"),
        (lambda: L.Dense(2, dtype="int32"), TypeError, r"dtype must be floating point"),
        (lambda: L.Reshape((2, -1, -1), name="x"), ValueError, r"^x: target_shape"),
        (lambda: L.Embedding(0, 3, name="x"), ValueError, r"^x: input_dim must be a positive integer"),
        (lambda: L.RNN(L.Dense(2), name="x"), TypeError, r"^x: cell must be a Layer with a state_size"),
    ],
)
def test_bad_configuration(make, error, message):
    with pytest.raises(error, match=message):
        make()


def test_dropout_noise_shape_must_fit():
    with pytest.raises(ValueError, match=r"^drop: noise_shape \(None, 1\) does not fit input shape \(2, 3, 4\)"):
        L.Dropout(0.5, noise_shape=(None, 1), name="drop")(tp.ones((2, 3, 4)), training=True)


def test_grouped_conv_channels_must_divide():
    with pytest.raises(ValueError, match=r"^g: input channels 3 .* are not divisible by groups=2"):
        L.Conv2D(4, 3, groups=2, name="g")(tp.ones((1, 4, 4, 3)))


def test_unknown_initializer_is_reported_at_build():
    with pytest.raises(ValueError, match="unknown initializer 'glorot_unifrom'"):
        L.Dense(2, kernel_initializer="glorot_unifrom")(tp.ones((1, 2)))


def test_set_weights_checks_count_and_shapes_and_changes_nothing_on_error():
    dense = L.Dense(2, name="d")
    dense(tp.ones((1, 3)))
    before = dense.get_weights()
    with pytest.raises(ValueError, match=r"^d: set_weights got 1 arrays, but the layer has 2 weights"):
        dense.set_weights(before[:1])
    with pytest.raises(ValueError, match=r"^d: set_weights: weight 'd/bias' has shape \(2,\), got \(3,\)"):
        dense.set_weights([np.zeros((3, 2)), np.zeros(3)])
    for a, b in zip(dense.get_weights(), before, strict=True):
        np.testing.assert_array_equal(a, b)
    with pytest.raises(ValueError, match=r"^e: count_params needs a built layer"):
        L.Dense(2, name="e").count_params()
