"""Every compiled kernel against an independent float64 NumPy reference, on 1 and 2 threads."""

import doctest
import hashlib
import itertools
import os
import re
import subprocess
import sys
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import numpy as np
import pytest
import torch
from hostile import PRIMITIVE_ORACLE

from tapeflow import _kernels as K
from tapeflow._kernels.fusion_opcodes import BINARY, UNARY

TOLERANCE = {np.float32: 1e-4, np.float64: 1e-10}
N, H, W, C_IN, C_OUT, KH, KW = 3, 7, 9, 3, 5, 3, 2


@pytest.fixture(params=[np.float32, np.float64], ids=["f32", "f64"])
def dtype(request):
    return request.param


def assert_close(actual, expected, dtype):
    assert actual.dtype == dtype and actual.shape == expected.shape
    tol = TOLERANCE[dtype]
    np.testing.assert_allclose(actual, expected, rtol=tol, atol=tol)


def same_or_valid(size, k, stride, dilation, padding):
    """TensorFlow's (out_size, pad_before) for one spatial dimension."""
    span = (k - 1) * dilation + 1
    if padding == "VALID":
        return (size - span) // stride + 1, 0
    out = -(-size // stride)
    return out, max((out - 1) * stride + span - size, 0) // 2


def geometry(h, w, kh, kw, stride, dilation, padding):
    out_h, pad_top = same_or_valid(h, kh, stride, dilation, padding)
    out_w, pad_left = same_or_valid(w, kw, stride, dilation, padding)
    return out_h, out_w, pad_top, pad_left


# ----------------------------------------------------------------------------- references


def padded(x, out_h, out_w, kh, kw, stride, dilation, pad_top, pad_left):
    n, h, w, c = x.shape
    hp = max(pad_top + h, (out_h - 1) * stride + (kh - 1) * dilation + 1)
    wp = max(pad_left + w, (out_w - 1) * stride + (kw - 1) * dilation + 1)
    xp = np.zeros((n, hp, wp, c))
    xp[:, pad_top : pad_top + h, pad_left : pad_left + w] = x
    return xp


def window_index(out_h, out_w, kh, kw, stride, dilation):
    """Index into a padded input that gives its [N, OH, OW, KH, KW, C] windows."""
    rows = np.arange(out_h)[:, None] * stride + np.arange(kh) * dilation
    cols = np.arange(out_w)[:, None] * stride + np.arange(kw) * dilation
    return slice(None), rows[:, None, :, None], cols[None, :, None, :]


def conv_reference(x, w, dy, stride, dilation, pad_top, pad_left, out_h, out_w):
    """(y, dx, dw) in float64 from explicit windows of a zero-padded input."""
    x, w, dy = (np.asarray(a, np.float64) for a in (x, w, dy))
    kh, kw = w.shape[:2]
    args = (out_h, out_w, kh, kw, stride, dilation)
    xp = padded(x, *args, pad_top, pad_left)
    index = window_index(*args)
    y = np.einsum("nabijc,ijco->nabo", xp[index], w)
    dw = np.einsum("nabijc,nabo->ijco", xp[index], dy)
    dxp = np.zeros_like(xp)
    np.add.at(dxp, index, np.einsum("nabo,ijco->nabijc", dy, w))
    h, wd = x.shape[1:3]
    return y, dxp[:, pad_top : pad_top + h, pad_left : pad_left + wd], dw


def pool_reference(x, dy, kh, kw, stride, pad_top, pad_left, out_h, out_w):
    """(max_y, max_dx, avg_y, avg_dx) with naive window loops over the real inputs only."""
    x, dy = np.asarray(x, np.float64), np.asarray(dy, np.float64)
    n, h, w, c = x.shape
    max_y, avg_y = np.zeros((n, out_h, out_w, c)), np.zeros((n, out_h, out_w, c))
    max_dx, avg_dx = np.zeros_like(x), np.zeros_like(x)
    for oh, ow in itertools.product(range(out_h), range(out_w)):
        r0, c0 = oh * stride - pad_top, ow * stride - pad_left
        rs = slice(max(r0, 0), min(r0 + kh, h))
        cs = slice(max(c0, 0), min(c0 + kw, w))
        win = x[:, rs, cs, :]
        wh, ww = win.shape[1:3]
        flat = win.reshape(n, wh * ww, c)
        first = np.argmax(flat, axis=1)  # the first max in row-major window order
        max_y[:, oh, ow] = flat.max(axis=1)
        for b, ch in itertools.product(range(n), range(c)):
            i, j = divmod(first[b, ch], ww)
            max_dx[b, rs.start + i, cs.start + j, ch] += dy[b, oh, ow, ch]
        avg_y[:, oh, ow] = win.mean(axis=(1, 2))
        avg_dx[:, rs, cs, :] += dy[:, oh, ow, None, None, :] / (wh * ww)
    return max_y, max_dx, avg_y, avg_dx


# ----------------------------------------------------------------------------- conv


@pytest.mark.parametrize("padding", ["SAME", "VALID"])
@pytest.mark.parametrize("dilation", [1, 2])
@pytest.mark.parametrize("stride", [1, 2])
@pytest.mark.parametrize("channels", [1, C_IN, 11])
def test_conv_matches_reference(stride, dilation, padding, channels, dtype, threads):
    rng = np.random.default_rng(stride * 10 + dilation)
    x = rng.standard_normal((N, H, W, channels)).astype(dtype)
    w = rng.standard_normal((KH, KW, channels, C_OUT)).astype(dtype)
    out_h, out_w, pt, pl = geometry(H, W, KH, KW, stride, dilation, padding)
    dy = rng.standard_normal((N, out_h, out_w, C_OUT)).astype(dtype)
    y_ref, dx_ref, dw_ref = conv_reference(x, w, dy, stride, dilation, pt, pl, out_h, out_w)
    geom = (stride, stride, pt, pl, dilation, dilation)
    assert_close(K.conv2d_forward(x, w, *geom, out_h, out_w), y_ref, dtype)
    assert_close(K.conv2d_backward_input(dy, w, H, W, *geom), dx_ref, dtype)
    assert_close(K.conv2d_backward_filter(x, dy, KH, KW, *geom), dw_ref, dtype)


@pytest.mark.parametrize(
    "kh, kw, sh, sw, pt, pl, out_h, out_w",
    [
        (1, 1, 1, 1, 0, 0, H, W),  # pointwise: no im2col
        (1, 1, 2, 1, 0, 0, 4, W),  # 1x1 with a stride still needs im2col
        (3, 2, 1, 2, 2, 0, 9, 4),  # uneven strides, padding larger than SAME
        (2, 3, 3, 1, 0, 1, 1, 5),  # output smaller than VALID would give
    ],
)
@pytest.mark.parametrize("batch", [1, 5])
@pytest.mark.parametrize("channels", [1, C_IN, 11])  # few channels and many take different paths
def test_conv_odd_geometry_and_small_chunks(kh, kw, sh, sw, pt, pl, out_h, out_w, batch, channels, threads):
    rng = np.random.default_rng(7)
    x = rng.standard_normal((batch, H, W, channels))
    w = rng.standard_normal((kh, kw, channels, C_OUT))
    dy = rng.standard_normal((batch, out_h, out_w, C_OUT))
    y_ref, dx_ref, dw_ref = conv_reference_2d(x, w, dy, sh, sw, pt, pl, out_h, out_w)
    geom = (sh, sw, pt, pl, 1, 1)
    for scratch in (1, 1 << 30):  # one output row per chunk, then the whole batch at once
        old = K._conv._set_col_buffer_bytes(scratch)
        try:
            assert_close(K.conv2d_forward(x, w, *geom, out_h, out_w), y_ref, np.float64)
            assert_close(K.conv2d_backward_input(dy, w, H, W, *geom), dx_ref, np.float64)
            assert_close(K.conv2d_backward_filter(x, dy, kh, kw, *geom), dw_ref, np.float64)
        finally:
            K._conv._set_col_buffer_bytes(old)


def conv_reference_2d(x, w, dy, sh, sw, pt, pl, out_h, out_w):
    """Naive loops for separate row/column strides (the einsum reference shares one stride)."""
    n, h, wd, c = x.shape
    kh, kw, _, o = w.shape
    y = np.zeros((n, out_h, out_w, o))
    dx, dw = np.zeros_like(x), np.zeros_like(w)
    for oh, ow, i, j in itertools.product(range(out_h), range(out_w), range(kh), range(kw)):
        ih, iw = oh * sh - pt + i, ow * sw - pl + j
        if 0 <= ih < h and 0 <= iw < wd:
            y[:, oh, ow] += x[:, ih, iw] @ w[i, j]
            dx[:, ih, iw] += dy[:, oh, ow] @ w[i, j].T
            dw[i, j] += x[:, ih, iw].T @ dy[:, oh, ow]
    return y, dx, dw


def test_conv_matches_torch():
    rng = np.random.default_rng(3)
    x = rng.standard_normal((2, 8, 7, 4))
    w = rng.standard_normal((3, 3, 4, 6))
    stride, pad, dil = 2, 1, 1
    tx = torch.tensor(x.transpose(0, 3, 1, 2), requires_grad=True)
    tw = torch.tensor(w.transpose(3, 2, 0, 1), requires_grad=True)
    ty = torch.nn.functional.conv2d(tx, tw, stride=stride, padding=pad, dilation=dil)
    out_h, out_w = ty.shape[2:]
    dy = rng.standard_normal((2, out_h, out_w, 6))
    tdy = torch.tensor(dy.transpose(0, 3, 1, 2))
    ty.backward(tdy)
    geom = (stride, stride, pad, pad, dil, dil)
    y = K.conv2d_forward(x, w, *geom, out_h, out_w)
    dx = K.conv2d_backward_input(dy, w, 8, 7, *geom)
    dw = K.conv2d_backward_filter(x, dy, 3, 3, *geom)
    np.testing.assert_allclose(y, ty.detach().numpy().transpose(0, 2, 3, 1), rtol=1e-10)
    np.testing.assert_allclose(dx, tx.grad.numpy().transpose(0, 2, 3, 1), rtol=1e-10)
    np.testing.assert_allclose(dw, tw.grad.numpy().transpose(2, 3, 1, 0), rtol=1e-10)
    # conv2d_backward_input is conv2d_transpose
    extra = [size - ((o - 1) * stride - 2 * pad + 3) for size, o in ((8, out_h), (7, out_w))]
    transposed = torch.nn.functional.conv_transpose2d(
        tdy, tw.detach(), stride=stride, padding=pad, output_padding=tuple(extra)
    )
    np.testing.assert_allclose(dx, transposed.numpy().transpose(0, 2, 3, 1), rtol=1e-10)


def test_conv_rejects_bad_arguments():
    x, w = np.zeros((1, 4, 4, 2)), np.zeros((2, 2, 3, 1))
    with pytest.raises(ValueError, match="channels"):
        K.conv2d_forward(x, w, 1, 1, 0, 0, 1, 1, 3, 3)
    w = np.zeros((2, 2, 2, 1))
    with pytest.raises(ValueError, match="strides"):
        K.conv2d_forward(x, w, 0, 1, 0, 0, 1, 1, 3, 3)
    with pytest.raises((TypeError, ValueError)):
        K.conv2d_forward(x.astype(np.float32), w, 1, 1, 0, 0, 1, 1, 3, 3)
    with pytest.raises(ValueError, match="contiguous"):
        K.conv2d_forward(x[:, ::2], w, 1, 1, 0, 0, 1, 1, 1, 3)


def test_conv_empty_batch():
    y = K.conv2d_forward(np.zeros((0, 5, 5, 2)), np.ones((3, 3, 2, 4)), 1, 1, 1, 1, 1, 1, 5, 5)
    assert y.shape == (0, 5, 5, 4)
    dw = K.conv2d_backward_filter(np.zeros((0, 5, 5, 2)), y, 3, 3, 1, 1, 1, 1, 1, 1)
    np.testing.assert_array_equal(dw, np.zeros((3, 3, 2, 4)))


# ----------------------------------------------------------------------------- pooling


@pytest.mark.parametrize("padding", ["SAME", "VALID"])
@pytest.mark.parametrize("stride", [1, 2])
def test_pooling_matches_reference(stride, padding, dtype, threads):
    rng = np.random.default_rng(stride)
    # Small integers make ties, which must send the gradient to the first max only.
    x = rng.integers(-2, 3, size=(N, H, W, C_IN)).astype(dtype)
    out_h, out_w, pt, pl = geometry(H, W, KH, KW, stride, 1, padding)
    dy = rng.standard_normal((N, out_h, out_w, C_IN)).astype(dtype)
    max_y, max_dx, avg_y, avg_dx = pool_reference(x, dy, KH, KW, stride, pt, pl, out_h, out_w)
    window = (KH, KW, stride, stride, pt, pl)
    assert_close(K.max_pool2d_forward(x, *window, out_h, out_w), max_y, dtype)
    assert_close(K.max_pool2d_backward(x, dy, *window), max_dx, dtype)
    assert_close(K.avg_pool2d_forward(x, *window, out_h, out_w), avg_y, dtype)
    assert_close(K.avg_pool2d_backward(dy, H, W, *window), avg_dx, dtype)


@pytest.mark.parametrize("stride", [1, 2])
def test_max_pool_over_many_channels_keeps_ties_and_nans(stride, dtype, threads):
    """37 channels: the vector loops' body and tail; ties go to the first max, NaN beats all."""
    rng = np.random.default_rng(40 + stride)
    x = rng.integers(-2, 3, size=(2, 6, 7, 37)).astype(dtype)
    x[rng.random(x.shape) < 0.03] = np.nan
    out_h, out_w, pt, pl = geometry(6, 7, 3, 3, stride, 1, "SAME")
    dy = rng.standard_normal((2, out_h, out_w, 37)).astype(dtype)
    max_y, max_dx, _, _ = pool_reference(x, dy, 3, 3, stride, pt, pl, out_h, out_w)
    window = (3, 3, stride, stride, pt, pl)
    np.testing.assert_array_equal(K.max_pool2d_forward(x, *window, out_h, out_w), max_y.astype(dtype))
    assert_close(K.max_pool2d_backward(x, dy, *window), max_dx, dtype)


def test_max_pool_propagates_nan_to_its_gradient():
    x = np.array([1.0, np.nan, 5.0, np.nan]).reshape(1, 2, 2, 1)
    y = K.max_pool2d_forward(x, 2, 2, 2, 2, 0, 0, 1, 1)
    assert np.isnan(y).all()
    dx = K.max_pool2d_backward(x, np.ones((1, 1, 1, 1)), 2, 2, 2, 2, 0, 0)
    assert dx.ravel().tolist() == [0.0, 1.0, 0.0, 0.0]


def test_pooling_rejects_bad_window():
    with pytest.raises(ValueError, match="max_pool2d_forward"):
        K.max_pool2d_forward(np.zeros((1, 4, 4, 1)), 0, 2, 1, 1, 0, 0, 2, 2)


# ----------------------------------------------------------------------------- softmax xent


def test_sparse_softmax_xent_matches_reference(dtype, threads):
    rng = np.random.default_rng(5)
    for rows, classes, scale in ((7, 11, 1.0), (300, 129, 30.0)):  # the second runs in parallel
        logits = (rng.standard_normal((rows, classes)) * scale).astype(dtype)
        labels = rng.integers(0, classes, size=rows)
        ref = logits.astype(np.float64)
        shifted = ref - ref.max(axis=1, keepdims=True)
        log_z = np.log(np.exp(shifted).sum(axis=1))
        expected_loss = log_z - shifted[np.arange(rows), labels]
        expected_grad = np.exp(shifted - log_z[:, None])
        expected_grad[np.arange(rows), labels] -= 1
        loss, grad = K.sparse_softmax_xent(logits, labels)
        assert_close(loss, expected_loss, dtype)
        assert_close(grad, expected_grad, dtype)


def test_sparse_softmax_xent_is_stable_and_marks_bad_labels():
    logits = np.array([[1000.0, 0.0, -1000.0], [0.0, 1.0, 2.0], [5.0, 5.0, 5.0]])
    loss, grad = K.sparse_softmax_xent(logits, np.array([0, 3, -1]))
    assert loss[0] == 0.0 and np.isfinite(grad[0]).all()
    assert np.isnan(loss[1:]).all() and np.isnan(grad[1:]).all()


def test_first_label_outside_finds_what_numpy_finds():
    rng = np.random.default_rng(4)
    for _ in range(20):
        labels = rng.integers(-2, 12, size=rng.integers(0, 30))
        bad = np.flatnonzero((labels < 0) | (labels >= 10))
        assert K.first_label_outside(labels, 10) == (bad[0] if bad.size else -1)
    with pytest.raises(TypeError, match="int64"):
        K.first_label_outside(np.zeros(3, np.int32), 10)


def test_sparse_softmax_xent_refuses_other_layouts():
    with pytest.raises(TypeError, match="logits"):
        K.sparse_softmax_xent(np.zeros((4, 3))[::2], np.zeros(2, np.int64))
    with pytest.raises(TypeError, match="labels"):
        K.sparse_softmax_xent(np.zeros((2, 3)), np.zeros(2, np.int32))
    with pytest.raises(ValueError, match="3 labels for 2 rows"):
        K.sparse_softmax_xent(np.zeros((2, 3)), np.zeros(3, np.int64))


# ----------------------------------------------------------------------------- embedding


def test_gather_and_scatter_rows(dtype, threads):
    rng = np.random.default_rng(9)
    params = rng.standard_normal((13, 6)).astype(dtype)
    ids = np.array([4, 0, 12, 4, 4, 7])  # repeated ids must all accumulate
    assert_close(K.gather_rows(params, ids), params.astype(np.float64)[ids], dtype)
    updates = rng.standard_normal((len(ids), 6)).astype(dtype)
    expected = params.astype(np.float64)
    np.add.at(expected, ids, updates.astype(np.float64))
    assert K.scatter_add_rows(params, ids, updates) is None
    assert_close(params, expected, dtype)
    big_ids = rng.integers(0, 13, size=40_000)  # enough to run in parallel
    assert_close(K.gather_rows(params, big_ids), params.astype(np.float64)[big_ids], dtype)


def test_embedding_rejects_out_of_range_ids_without_writing():
    table = np.zeros((3, 2))
    with pytest.raises(IndexError, match="id 3 at position 1"):
        K.gather_rows(table, np.array([0, 3]))
    with pytest.raises(IndexError, match="id -1"):
        K.scatter_add_rows(table, np.array([1, -1]), np.ones((2, 2)))
    assert not table.any()
    with pytest.raises(ValueError, match="updates"):
        K.scatter_add_rows(table, np.array([1]), np.ones((2, 2)))


# ----------------------------------------------------------------------------- fused adam


@pytest.mark.parametrize("shape", [(5,), (7, 5003)], ids=["serial", "parallel"])
def test_adam_update_matches_reference(shape, dtype, threads):
    rng = np.random.default_rng(11)
    param, m = rng.standard_normal(shape), rng.standard_normal(shape) * 0.1
    v = rng.random(shape) * 0.01
    ref = [a.copy() for a in (param, m, v)]
    ours = [a.astype(dtype) for a in (param, m, v)]
    lr, b1, b2, eps = 1e-2, 0.9, 0.999, 1e-7
    for step in range(1, 4):
        grad = rng.standard_normal(shape)
        c1, c2 = 1 - b1**step, 1 - b2**step
        ref[1] = b1 * ref[1] + (1 - b1) * grad
        ref[2] = b2 * ref[2] + (1 - b2) * grad * grad
        ref[0] = ref[0] - lr * (ref[1] / c1) / (np.sqrt(ref[2] / c2) + eps)
        given, snapshot = ours, [a.copy() for a in ours]
        ours = list(K.adam_update(*given, grad.astype(dtype), lr, b1, b2, eps, c1, c2))
        for before, after in zip(snapshot, given, strict=True):
            np.testing.assert_array_equal(after, before)  # the update is out of place
    for actual, expected in zip(ours, ref, strict=True):
        assert_close(actual, expected, dtype)


def test_adam_update_rejects_mismatched_arrays():
    a = np.zeros(4)
    with pytest.raises(TypeError, match="grad"):
        K.adam_update(a, a.copy(), a.copy(), a.astype(np.float32), 0.1, 0.9, 0.99, 1e-8, 1, 1)
    with pytest.raises(ValueError, match="shapes differ"):
        K.adam_update(a, a.copy(), a.copy(), np.zeros(5), 0.1, 0.9, 0.99, 1e-8, 1, 1)


@pytest.mark.parametrize("rows", [3, 3000], ids=["serial", "parallel"])
def test_adam_update_rows_writes_the_dense_step_into_its_rows(rows, dtype, threads):
    rng = np.random.default_rng(12)
    tables = [rng.standard_normal((rows + 5, 16)), rng.standard_normal((rows + 5, 16)) * 0.1]
    tables.append(rng.random((rows + 5, 16)) * 0.01)
    p, m, v = (t.astype(dtype) for t in tables)
    ids = rng.permutation(rows + 5)[:rows].astype(np.int64)
    grad = rng.standard_normal((rows, 16)).astype(dtype)
    before = [t.copy() for t in (p, m, v)]
    dense = K.adam_update(*(t[ids] for t in before), grad, 0.01, 0.9, 0.999, 1e-7, 0.19, 0.003)
    assert K.adam_update_rows(p, m, v, ids, grad, 0.01, 0.9, 0.999, 1e-7, 0.19, 0.003) is None
    untouched = np.setdiff1d(np.arange(rows + 5), ids)
    for table, old, new in zip((p, m, v), before, dense, strict=True):
        np.testing.assert_array_equal(table[ids], new)  # the same arithmetic as the dense step
        np.testing.assert_array_equal(table[untouched], old[untouched])


def test_adam_update_rows_refuses_repeated_or_outside_ids_before_writing():
    p, m, v = np.ones((4, 2)), np.zeros((4, 2)), np.zeros((4, 2))
    for ids, error in (([1, 3, 1], "repeats"), ([0, 4], "out of range"), ([-1], "out of range")):
        with pytest.raises((ValueError, IndexError), match=error):
            K.adam_update_rows(p, m, v, np.array(ids), np.ones((len(ids), 2)), 0.1, 0.9, 0.99, 1e-8, 1, 1)
        np.testing.assert_array_equal(p, 1.0)
    with pytest.raises(ValueError, match="gradient rows"):
        K.adam_update_rows(p, m, v, np.array([0, 1]), np.ones((3, 2)), 0.1, 0.9, 0.99, 1e-8, 1, 1)
    with pytest.raises(TypeError, match="int64"):
        K.adam_update_rows(p, m, v, np.array([0], np.int32), np.ones((1, 2)), 0.1, 0.9, 0.99, 1e-8, 1, 1)
    with pytest.raises(ValueError, match="C-contiguous"):
        K.adam_update_rows(p.T, m.T, v.T, np.array([0]), np.ones((1, 4)), 0.1, 0.9, 0.99, 1e-8, 1, 1)


def test_adam_update_takes_strided_arrays_as_their_copies():
    rng = np.random.default_rng(0)
    p, m, v, g = rng.random((4, 16))
    strided = rng.random(32)
    strided[::2] = g
    expected = K.adam_update(p, m, v, g, 0.1, 0.9, 0.99, 1e-8, 0.5, 0.25)
    for actual, want in zip(
        K.adam_update(p, m, v, strided[::2], 0.1, 0.9, 0.99, 1e-8, 0.5, 0.25), expected, strict=True
    ):
        np.testing.assert_array_equal(actual, want)


@pytest.mark.parametrize("shape", [(7,), (300, 1001)], ids=["serial", "parallel"])
def test_relu_and_its_gradient_match_numpy(shape, dtype, threads):
    rng = np.random.default_rng(12)
    x, g = rng.standard_normal(shape).astype(dtype), rng.standard_normal(shape).astype(dtype)
    x.reshape(-1)[:5] = [np.nan, -0.0, 0.0, -np.inf, np.inf]
    y = K.relu(x)
    np.testing.assert_array_equal(y, np.maximum(x, 0))
    assert np.signbit(y.reshape(-1)[1]) == np.signbit(np.maximum(x, 0).reshape(-1)[1])
    np.testing.assert_array_equal(K.relu_grad(g, y), np.where(y > 0, g, 0))
    assert K.relu(x).dtype == K.relu_grad(g, y).dtype == dtype


@pytest.mark.parametrize("shape", [(2, 3, 5, 9), (16, 28, 28, 96)], ids=["serial", "parallel"])
def test_relu_gradient_reads_a_slice_of_a_wider_gradient_in_place(shape, dtype, threads):
    """g a slice along the last axis (what `split` gives a branch of a concatenation): its rows
    are read where they lie; other strided layouts are copied first; the same numbers."""
    rng = np.random.default_rng(13)
    wide = rng.standard_normal(shape[:-1] + (shape[-1] + 11,)).astype(dtype)
    y = K.relu(rng.standard_normal(shape).astype(dtype))
    y.reshape(-1)[:2] = [np.nan, 0.0]
    for g, mask in (
        (wide[..., 4 : 4 + shape[-1]], y),
        (wide[:1, ..., 4 : 4 + shape[-1]], y[:1]),  # a leading axis of one
        (wide[:, ::2, :, 4 : 4 + shape[-1]], y[:, : (shape[1] + 1) // 2]),  # rows unevenly apart
        (np.swapaxes(wide[..., : shape[-1]], 1, 2), np.swapaxes(y, 1, 2).copy()),  # last axis not rows
    ):
        np.testing.assert_array_equal(K.relu_grad(g, mask), np.where(mask > 0, g, 0))


@pytest.mark.parametrize("shape", [(5,), (3, 7), (16, 28, 28, 40)], ids=["vector", "rows", "parallel"])
def test_relu_bias_gradient_masks_and_sums_in_one_pass(shape, dtype, threads):
    """The mask of relu_grad and its sum over every axis but the last, against NumPy in float64;
    g contiguous or a slice along the last axis of a wider array."""
    rng = np.random.default_rng(14)
    wide = rng.standard_normal(shape[:-1] + (shape[-1] + 9,)).astype(dtype)
    y = K.relu(rng.standard_normal(shape).astype(dtype))
    y.reshape(-1)[:2] = [np.nan, 0.0]
    for g in (np.ascontiguousarray(wide[..., : shape[-1]]), wide[..., 5 : 5 + shape[-1]]):
        gz, db = K.relu_bias_grad(g, y)
        want = np.where(y > 0, g, 0)
        np.testing.assert_array_equal(gz, want)
        assert db.dtype == dtype and db.shape == shape[-1:]
        np.testing.assert_allclose(
            db,
            want.astype(np.float64).sum(axis=tuple(range(len(shape) - 1))),
            rtol=1e-5 if dtype == np.float32 else 1e-12,
            atol=1e-5,
        )
    with pytest.raises(ValueError, match="relu_bias_grad"):
        K.relu_bias_grad(np.ones((), dtype), np.ones((), dtype))


def test_relu_rejects_mismatched_arrays():
    a = np.zeros(4)
    with pytest.raises(TypeError, match="relu_grad"):
        K.relu_grad(a, a.astype(np.float32))
    with pytest.raises(ValueError, match="shapes"):
        K.relu_grad(a, np.zeros(5))
    with pytest.raises(TypeError, match="numpy array"):
        K.relu([1.0, -1.0])
    strided = np.array([-1.0, 5.0, 2.0, 5.0, -0.0, 5.0])[::2]
    assert K.relu(strided).tolist() == np.maximum(strided, 0).tolist()


# One row through a dense layer: bands of 64 and 8 outputs and single outputs, split
# over the threads from 128 outputs and 2^16 multiply-adds.
@pytest.mark.parametrize("k, n", [(1, 1), (5, 7), (33, 8), (100, 63), (64, 64), (20, 65), (784, 256), (300, 130)])
@pytest.mark.parametrize("relu", [False, True])
def test_dense_of_one_row_matches_float64(k, n, relu, threads):
    rng = np.random.default_rng(k * 1000 + n)
    x, w, b = (rng.standard_normal(s).astype(np.float32) for s in ((1, k), (k, n), (n,)))
    expected = x.astype(np.float64) @ w.astype(np.float64) + b
    if relu:
        expected = np.maximum(expected, 0)
    got = K.dense(x, w, b, relu)
    assert got.shape == (1, n) and got.dtype == np.float32
    np.testing.assert_allclose(got, expected, rtol=1e-5, atol=1e-5 * np.sqrt(k))


def test_dense_of_one_row_in_other_layouts_and_dtypes(dtype):
    rng = np.random.default_rng(3)
    x, w, b = (rng.standard_normal(s).astype(dtype) for s in ((1, 40), (40, 70), (70,)))
    expected = np.maximum(x.astype(np.float64) @ w + b, 0)
    tol = 1e-5 if dtype == np.float32 else 1e-12
    for xs, ws in ((x, np.ascontiguousarray(w.T).T), (np.repeat(x, 2, axis=1)[:, ::2], w)):
        np.testing.assert_allclose(K.dense(xs, ws, b, True), expected, rtol=tol, atol=tol)


def test_dense_of_one_row_reads_arrays_at_any_offset():
    rng = np.random.default_rng(4)
    buffer = rng.standard_normal(1 + 33 * 200 + 200).astype(np.float32)
    x, w, b = buffer[1:34].reshape(1, 33), buffer[35 : 35 + 33 * 150].reshape(33, 150), buffer[-151:-1]
    assert all(a.flags.c_contiguous and a.ctypes.data % 32 for a in (x, w, b))
    np.testing.assert_allclose(K.dense(x, w, b, False), x.astype(np.float64) @ w + b, rtol=1e-5, atol=1e-5)


def test_dense_rejects_a_bias_of_the_wrong_size():
    x, w = np.ones((1, 3), np.float32), np.ones((3, 4), np.float32)
    with pytest.raises(ValueError, match=r"dense: bias of shape \(5,\)"):
        K.dense(x, w, np.ones(5, np.float32), False)
    with pytest.raises(ValueError, match="dense: bias"):
        K.dense(x, w, np.ones(4, np.float64), False)


# Dense layers in a chain: one row through all of them in one parallel region, each layer
# split over the threads from 128 outputs, the smaller ones on the first thread.
@pytest.mark.parametrize(
    "widths", [(784, 256, 256, 10), (5, 7), (33, 200, 9, 130, 1), (300, 64, 300)], ids=lambda w: "-".join(map(str, w))
)
def test_a_dense_chain_matches_float64_and_the_layers_one_by_one(widths, threads):
    rng = np.random.default_rng(sum(widths))
    relus = [i % 2 == 0 for i in range(len(widths) - 1)]
    x = rng.standard_normal((1, widths[0])).astype(np.float32)
    params = []
    for k, n in itertools.pairwise(widths):
        params += [rng.standard_normal((k, n)).astype(np.float32), rng.standard_normal(n).astype(np.float32)]
    got = K.DenseChain(relus)(x, *params)
    expected, one_by_one = x.astype(np.float64), x
    for w, b, relu in zip(params[::2], params[1::2], relus, strict=True):
        expected = expected @ w + b
        expected = np.maximum(expected, 0) if relu else expected
        one_by_one = K.dense(one_by_one, w, b, relu)
    assert got.shape == (1, widths[-1]) and got.dtype == np.float32
    np.testing.assert_array_equal(got, one_by_one)  # the same sums in the same order
    np.testing.assert_allclose(got, expected, rtol=1e-4, atol=1e-4 * max(widths))


def test_a_dense_chain_takes_only_one_float32_row_of_matching_layers():
    chain = K.DenseChain([True, False])
    w1, b1 = np.ones((3, 4), np.float32), np.ones(4, np.float32)
    w2, b2 = np.ones((4, 2), np.float32), np.ones(2, np.float32)
    assert chain(np.ones((1, 3), np.float32), w1, b1, w2, b2).tolist() == [[17.0, 17.0]]
    assert chain(np.ones((2, 3), np.float32), w1, b1, w2, b2) is None  # two rows
    assert chain(np.ones((1, 3)), w1, b1, w2, b2) is None  # float64
    assert chain(np.ones((1, 3), np.float32), w1, b1, w2.T.copy(), b2) is None  # widths do not meet
    assert chain(np.ones((1, 3), np.float32), w1, b1, w2, np.ones(3, np.float32)) is None  # bias width
    assert chain(np.ones((1, 3), np.float32), w1, b1) is None  # a layer's arrays missing
    assert chain(np.ones((1, 6), np.float32)[:, ::2], w1, b1, w2, b2) is None  # not contiguous
    with pytest.raises(ValueError, match="DenseChain: takes 1 to 16 layers, got 0"):
        K.DenseChain([])


# Fused elementwise programs, bound once (elementwise.Program): every opcode against NumPy.
_UNARY_REFERENCE = {name: PRIMITIVE_ORACLE[name] for name in UNARY}
_BINARY_REFERENCE = {name: PRIMITIVE_ORACLE[name] for name in BINARY}


def _program(instructions):
    from tapeflow._kernels import elementwise

    ops, args_a, args_b, consts = [], [], [], []
    for name, *args in instructions:
        ops.append(elementwise.OPCODES[name])
        if name == "const":
            consts.append(args[0])
            args = [len(consts) - 1]
        args_a.append(args[0])
        args_b.append(args[1] if len(args) > 1 else 0)
    return elementwise.Program(ops, args_a, args_b, np.array(consts or [0.0]), _no_fallback)


def _no_fallback(*arrays):
    raise AssertionError(f"fell back for {[a.shape for a in arrays]}")


@pytest.mark.parametrize("size", [(3, 5), (300, 700)], ids=["serial", "parallel"])
@pytest.mark.parametrize("name", sorted(_UNARY_REFERENCE))
def test_program_unary_ops_match_numpy(name, size, dtype, threads):
    x = np.random.default_rng(5).uniform(0.1, 3.0, size).astype(dtype) * (1 if name in ("log", "sqrt", "rsqrt") else -1)
    x.reshape(-1)[0] = np.nan
    got = _program([("input", 0), (name, 0)])(x)
    with np.errstate(all="ignore"):
        want = _UNARY_REFERENCE[name](x.astype(np.float64))
    assert got.dtype == dtype and got.shape == x.shape
    tol = 1e-12 if dtype == np.float64 else 2e-6
    np.testing.assert_allclose(got, want, rtol=tol, atol=tol)


@pytest.mark.parametrize("name", sorted(_BINARY_REFERENCE))
def test_program_binary_ops_broadcast_rows_and_scalars(name, dtype, threads):
    rng = np.random.default_rng(6)
    x, row = rng.standard_normal((400, 300)).astype(dtype), rng.standard_normal(300).astype(dtype)
    x.reshape(-1)[:2] = [np.nan, 1.0]
    row[1] = np.nan  # maximum and minimum let NaN through from either side
    program = _program([("input", 0), ("input", 1), (name, 0, 1), ("const", 0.5), (name, 2, 3)])
    op = _BINARY_REFERENCE[name]
    for got, want in (
        (program(x, row), op(op(x, row), 0.5)),
        (program(row, x), op(op(row, x), 0.5)),
        (program(x, np.asarray(2.0, dtype)), op(op(x, 2.0), 0.5)),
    ):
        assert got.dtype == dtype and got.shape == x.shape
        np.testing.assert_allclose(got, want.astype(dtype), rtol=1e-6, atol=1e-6)


def test_program_hands_other_inputs_to_its_general_path():
    from tapeflow._kernels import elementwise

    calls = []
    ops, args = np.array([0, 0, elementwise.OPCODES["add"]], np.int32), np.array([0, 1, 0], np.int32)
    program = elementwise.Program(ops, args, np.array([0, 0, 1], np.int32), np.zeros(1), lambda *a: calls.append(a))
    column, row = np.ones((3, 1)), np.ones((1, 4))
    for arrays in ((column, row), (np.ones((4, 6))[:, ::2], np.ones(3)), (np.ones(3), np.ones(3, np.float32))):
        program(*arrays)
    program(np.ones(3))  # fewer inputs than the program reads
    assert len(calls) == 4


def test_program_rejects_malformed_instructions():
    from tapeflow._kernels import elementwise

    add = elementwise.OPCODES["add"]
    with pytest.raises(ValueError, match="instruction 1"):
        elementwise.Program(np.array([0, add], np.int32), np.zeros(2, np.int32), np.array([0, 1]), np.zeros(1), None)
    with pytest.raises(ValueError, match="empty program"):
        elementwise.Program(np.zeros(0, np.int32), np.zeros(0), np.zeros(0), np.zeros(1), None)
    with pytest.raises(ValueError, match="constant 3"):
        elementwise.Program(np.array([1], np.int32), np.array([3]), np.zeros(1), np.zeros(1), None)


# ----------------------------------------------------------------------------- build


def test_build_info_reports_every_module():
    info = K.build_info()
    expected = {"conv", "gemm", "pool", "softmax_xent", "embedding", "fused", "fpenv", "elementwise", "word2vec"}
    expected |= {"conv3d", "pool3d", "depthwise", "recurrent", "allocator", "draws", "schedule", "channels"}
    assert set(info) == set(K.MODULES) == expected
    for name, entry in info.items():
        path = Path(entry["path"])
        assert path.name.startswith(name + ".") and path.exists()
        assert isinstance(entry["openmp"], bool)
        pyx = path.with_name(f"{name}.pyx")
        if pyx.exists():
            includes = re.findall(rb'^include "([^"]+)"', pyx.read_bytes(), re.MULTILINE)
            digest = hashlib.sha256(pyx.read_bytes())
            for include in includes:
                digest.update(pyx.with_name(include.decode()).read_bytes())
            assert entry["source_sha256"] == digest.hexdigest()


def test_stale_or_missing_build_names_the_rebuild_command(monkeypatch):
    pyx = Path(K.build_info()["conv"]["path"]).with_name("conv.pyx")
    if pyx.exists():
        monkeypatch.setattr(K._conv, "SOURCE_SHA256", "0" * 64)
        with pytest.raises(ImportError, match="make build") as err:
            K._load("conv")
        assert "tapeflow._kernels.conv is stale" in str(err.value)
    with pytest.raises(ImportError, match="make build"):
        K.check_fresh("pool", "0" * 64, Path(__file__))
    with pytest.raises(ImportError, match=r"no_such_kernel is not built.*make build"):
        K._load("no_such_kernel")


def test_thread_count_round_trips():
    old = K.get_num_threads()
    try:
        K.set_num_threads(1)
        assert K.get_num_threads() == 1
        K.set_num_threads(2)
        assert K.get_num_threads() == (2 if K.build_info()["conv"]["openmp"] else 1)
        with pytest.raises(ValueError):
            K.set_num_threads(0)
    finally:
        K.set_num_threads(old)


@pytest.mark.parametrize("module", [K, K._conv, K._xent, K._embedding, K._fused, K._channels])
def test_docstring_examples(module):
    result = doctest.testmod(module)
    assert result.failed == 0 and result.attempted > 0


def test_conv_from_concurrent_python_threads():
    """Concurrent callers (the GIL is released) get right answers; OpenBLAS gets its thread
    count back when the last of them returns."""
    rng = np.random.default_rng(13)
    x, w = rng.standard_normal((6, H, W, C_IN)), rng.standard_normal((KH, KW, C_IN, C_OUT))
    dy = rng.standard_normal((6, H, W, C_OUT))
    out_h, out_w, pt, pl = geometry(H, W, KH, KW, 1, 1, "SAME")
    expected = conv_reference(x, w, dy, 1, 1, pt, pl, out_h, out_w)
    blas_threads = K._conv._blas_num_threads()
    geom = (1, 1, pt, pl, 1, 1)

    def run():
        return [
            K.conv2d_forward(x, w, *geom, out_h, out_w),
            K.conv2d_backward_input(dy, w, H, W, *geom),
            K.conv2d_backward_filter(x, dy, KH, KW, *geom),
        ]

    with ThreadPoolExecutor(4) as pool:
        results = list(pool.map(lambda _: run(), range(16)))
    for result in results:
        for actual, reference in zip(result, expected, strict=True):
            assert_close(actual, reference, np.float64)
    assert K._conv._blas_num_threads() == blas_threads
    assert K._conv._blas_calls_running() == 0


def test_set_num_threads_refuses_counts_the_runtime_cannot_start():
    """100,000 threads used to crash the process at the next kernel call."""
    old = K.get_num_threads()
    try:
        for bad in (100_000, K.MAX_THREADS + 1, 0, -3):
            with pytest.raises(ValueError, match=rf"set_num_threads: .* between 1 and {K.MAX_THREADS}.*got {bad}"):
                K.set_num_threads(bad)
        for bad in (2.0, "2", True, None):
            with pytest.raises(TypeError, match="set_num_threads: expected an integer"):
                K.set_num_threads(bad)
        assert K.get_num_threads() == old  # a refused count changes nothing
        K.set_num_threads(np.int64(1))
        assert K.get_num_threads() == 1
    finally:
        K.set_num_threads(old)


def _openmp_environment(env: dict) -> tuple[str, str, str]:
    """(OMP_WAIT_POLICY and GOMP_SPINCOUNT as the OpenMP runtime read them, GOMP_SPINCOUNT as
    the environment shows it) after importing tapeflow in a fresh process with `env`."""
    code = (
        "import ctypes, os, tapeflow\n"
        "print(os.environ.get('GOMP_SPINCOUNT', '<unset>'), flush=True)\n"
        "ctypes.CDLL('libgomp.so.1').omp_display_env(1)\n"
    )
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr[-2000:]
    shown = out.stdout + out.stderr
    policy = re.search(r"OMP_WAIT_POLICY = '(\w+)'", shown)
    spin = re.search(r"GOMP_SPINCOUNT = '(\w+)'", shown)
    return (
        policy.group(1) if policy else "<not shown>",
        spin.group(1) if spin else "<not shown>",
        out.stdout.splitlines()[0],
    )


@pytest.mark.skipif(not K.build_info()["conv"]["openmp"], reason="kernels built without OpenMP")
def test_openmp_threads_spin_briefly_then_sleep_without_changing_the_environment():
    """Long-spinning OpenMP threads collapse training beside another busy process, and threads
    that sleep at once pay a wake-up per parallel loop: the kernels run with a short spin
    count, the environment seen by other libraries stays as it was, and a policy or spin
    count the user chose wins."""
    env = {k: v for k, v in os.environ.items() if k not in ("OMP_WAIT_POLICY", "GOMP_SPINCOUNT")}
    assert _openmp_environment(env) == ("PASSIVE", K.IDLE_SPIN, "<unset>")
    assert _openmp_environment({**env, "OMP_WAIT_POLICY": "ACTIVE"})[0] == "ACTIVE"
    assert _openmp_environment({**env, "GOMP_SPINCOUNT": "7"}) == ("PASSIVE", "7", "7")
