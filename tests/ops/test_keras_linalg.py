"""tp.ops.linalg (Keras 3's keras.ops.linalg): values against NumPy in float64, gradients
of every decomposition against central finite differences (through functions that do not
depend on the sign choices of eigen- and singular vectors), a representative set against
keras.ops itself (torch backend), frozen against eager, and clear errors."""

from __future__ import annotations

import numpy as np
import pytest
from keras_oracle import check_vjp

import tapeflow as tp
from tapeflow.ops import linalg

keras = pytest.importorskip("keras")
K = keras.ops

_RNG = np.random.default_rng(5)


def normal(*shape):
    return _RNG.standard_normal(shape)


def spd(*batch, n=3):
    """Symmetric positive-definite matrices with well separated eigenvalues."""
    a = normal(*batch, n, n)
    return a @ np.swapaxes(a, -1, -2) + n * np.eye(n)


def sym(a):
    return 0.5 * (a + np.swapaxes(a, -1, -2))


def _symmetrized(fn):
    """fn of the symmetric part of its input: what a symmetric-input op's gradient is of."""
    return lambda a: fn((a + tp.transpose(a, (*range(a.ndim - 2), a.ndim - 1, a.ndim - 2))) * 0.5)


# =============================================================== values
def test_values_match_numpy():
    a, s, b = normal(2, 4, 4), spd(2, n=4), normal(2, 4, 3)
    np.testing.assert_allclose(tp.ops.cholesky(s).numpy(), np.linalg.cholesky(s), rtol=1e-12)
    np.testing.assert_allclose(tp.ops.cholesky(s, upper=True).numpy(), np.swapaxes(np.linalg.cholesky(s), 1, 2))
    np.testing.assert_allclose(tp.ops.inv(a).numpy(), np.linalg.inv(a), rtol=1e-10)
    np.testing.assert_allclose(tp.ops.det(a).numpy(), np.linalg.det(a), rtol=1e-10)
    sign, logabs = tp.ops.slogdet(a)
    np.testing.assert_allclose(sign.numpy(), np.linalg.slogdet(a)[0])
    np.testing.assert_allclose(logabs.numpy(), np.linalg.slogdet(a)[1], rtol=1e-10)
    np.testing.assert_allclose(tp.ops.solve(a, b).numpy(), np.linalg.solve(a, b), rtol=1e-10)
    np.testing.assert_allclose(tp.ops.solve(a, b[..., 0]).numpy(), np.linalg.solve(a, b[..., :1])[..., 0], rtol=1e-10)
    np.testing.assert_allclose(
        tp.ops.solve_triangular(a, b, lower=True).numpy(), np.linalg.solve(np.tril(a), b), rtol=1e-10
    )
    np.testing.assert_allclose(tp.ops.solve_triangular(a, b).numpy(), np.linalg.solve(np.triu(a), b), rtol=1e-10)
    w, v = tp.ops.eigh(s)
    np.testing.assert_allclose(w.numpy(), np.linalg.eigh(s)[0], rtol=1e-10)
    np.testing.assert_allclose((v.numpy() * w.numpy()[:, None]) @ np.swapaxes(v.numpy(), 1, 2), s, atol=1e-10)
    np.testing.assert_allclose(tp.ops.cholesky_inverse(np.linalg.cholesky(s)).numpy(), np.linalg.inv(s), rtol=1e-9)
    upper = np.swapaxes(np.linalg.cholesky(s), 1, 2)
    np.testing.assert_allclose(tp.ops.cholesky_inverse(upper, upper=True).numpy(), np.linalg.inv(s), rtol=1e-9)


@pytest.mark.parametrize("shape", [(5, 3), (3, 5), (4, 4), (2, 5, 3)])
def test_decompositions_reconstruct(shape):
    x = normal(*shape)
    q, r = tp.ops.qr(x)
    nq, nr = np.linalg.qr(x)
    np.testing.assert_allclose(q.numpy(), nq, atol=1e-12)
    np.testing.assert_allclose(r.numpy(), nr, atol=1e-12)
    q, r = tp.ops.qr(x, mode="complete")
    assert q.shape[-1] == shape[-2] and r.shape[-2:] == shape[-2:]
    np.testing.assert_allclose(q.numpy() @ r.numpy(), x, atol=1e-12)
    u, s, vh = tp.ops.svd(x, full_matrices=False)
    np.testing.assert_allclose((u.numpy() * s.numpy()[..., None, :]) @ vh.numpy(), x, atol=1e-12)
    u, s, vh = tp.ops.svd(x)
    assert u.shape[-2:] == (shape[-2],) * 2 and vh.shape[-2:] == (shape[-1],) * 2
    np.testing.assert_allclose(tp.ops.svd(x, compute_uv=False).numpy(), np.linalg.svd(x, compute_uv=False))
    np.testing.assert_allclose(tp.ops.pinv(x).numpy(), np.linalg.pinv(x), atol=1e-12)


def test_lstsq_pinv_and_rank_on_a_rank_deficient_matrix():
    a = normal(6, 2) @ normal(2, 4)
    b = normal(6, 3)
    np.testing.assert_allclose(tp.ops.lstsq(a, b).numpy(), np.linalg.lstsq(a, b)[0], atol=1e-10)
    np.testing.assert_allclose(tp.ops.lstsq(a, b[:, 0]).numpy(), np.linalg.lstsq(a, b[:, 0])[0], atol=1e-10)
    np.testing.assert_allclose(tp.ops.lstsq(a, b, rcond=0.5).numpy(), np.linalg.lstsq(a, b, rcond=0.5)[0], atol=1e-10)
    rank = tp.ops.matrix_rank(a)
    assert rank.dtype == tp.int32 and rank.item() == 2
    assert tp.ops.matrix_rank(np.stack([np.eye(3), np.zeros((3, 3))])).numpy().tolist() == [3, 0]
    assert tp.ops.matrix_rank(np.diag([1.0, 1e-3, 0.0]), tol=1e-2).item() == 1


def test_lu_factor_matches_scipy():
    scipy_linalg = pytest.importorskip("scipy.linalg")
    x = normal(3, 5, 5)
    lu, piv = tp.ops.lu_factor(x)
    assert piv.dtype == tp.int32
    for k in range(3):
        want_lu, want_piv = scipy_linalg.lu_factor(x[k])
        np.testing.assert_allclose(lu.numpy()[k], want_lu, atol=1e-12)
        np.testing.assert_array_equal(piv.numpy()[k], want_piv)


@pytest.mark.parametrize("ord", [None, "fro", "nuc", 1, -1, 2, -2, np.inf, -np.inf])
def test_matrix_norms(ord):
    x = normal(2, 3, 4)
    for axis in ((1, 2), (2, 1)):
        for keepdims in (False, True):
            got = tp.ops.norm(x, ord=ord, axis=axis, keepdims=keepdims).numpy()
            np.testing.assert_allclose(got, np.linalg.norm(x, ord=ord, axis=axis, keepdims=keepdims), rtol=1e-12)


@pytest.mark.parametrize("ord", [None, 1, 2, 0, 3, 0.5, np.inf, -np.inf])
def test_vector_norms(ord):
    x = normal(3, 4)
    np.testing.assert_allclose(tp.ops.norm(x, ord=ord, axis=-1).numpy(), np.linalg.norm(x, ord=ord, axis=-1))
    np.testing.assert_allclose(tp.ops.norm(x[0], ord=ord).numpy(), np.linalg.norm(x[0], ord=ord))
    assert tp.ops.norm(x, keepdims=True).shape == (1, 1)
    assert tp.ops.norm(np.array([3, 4])).dtype == tp.float32


# ============================================================ gradients
def test_cholesky_gradient():
    check_vjp(_symmetrized(tp.ops.cholesky), spd(n=3), seed=9)
    check_vjp(_symmetrized(lambda a: tp.ops.cholesky(a, upper=True)), spd(2, n=3), seed=9)


def test_eigh_gradient_of_values_and_sign_free_vector_products():
    def fn(a):
        w, v = tp.ops.eigh(a)
        return w, v * v[..., :1, :]  # each column times its first entry: the sign cancels

    check_vjp(_symmetrized(fn), spd(2, n=3), seed=9)


@pytest.mark.parametrize("shape", [(4, 3), (4, 4), (2, 3, 3)])
def test_qr_gradient(shape):
    def fn(x):
        q, r = tp.ops.qr(x)
        return q, r

    check_vjp(fn, normal(*shape), seed=9)


@pytest.mark.parametrize("shape", [(4, 3), (3, 4), (3, 3), (2, 3, 2)])
def test_svd_gradient(shape):
    def fn(x):
        u, s, vh = tp.ops.svd(x, full_matrices=False)
        # the sign of each singular pair cancels in u[:, i] * vh[i, :]
        ut = tp.transpose(u, (*range(u.ndim - 2), u.ndim - 1, u.ndim - 2))
        return s, u[..., :, :1] * vh[..., :1, :], u[..., :, 1:2] * vh[..., 1:2, :], tp.matmul(u, ut)

    check_vjp(fn, normal(*shape), tol=1e-5, seed=9)


def test_solve_inv_det_gradients():
    a, b = normal(2, 3, 3) + 3 * np.eye(3), normal(2, 3, 2)
    check_vjp(tp.ops.solve, a, b, seed=9)
    check_vjp(tp.ops.solve, a[0], b[0, :, 0], seed=9)
    check_vjp(lambda x, y: tp.ops.solve_triangular(x, y, lower=True), a, b, seed=9)
    check_vjp(lambda x, y: tp.ops.solve_triangular(x, y), a[0], b[0, :, 0], seed=9)
    check_vjp(tp.ops.inv, a, seed=9)
    check_vjp(tp.ops.det, a, seed=9)
    check_vjp(lambda x: tp.ops.slogdet(x)[1], a, seed=9)
    check_vjp(tp.ops.cholesky_inverse, np.linalg.cholesky(spd(n=3)), seed=9)


def test_composite_gradients():
    check_vjp(tp.ops.pinv, normal(4, 3), tol=1e-5, seed=9)
    check_vjp(tp.ops.lstsq, normal(4, 2), normal(4, 3), tol=1e-5, seed=9)
    check_vjp(lambda x: tp.ops.norm(x, ord="nuc"), normal(3, 4), tol=1e-5, seed=9)
    check_vjp(lambda x: tp.ops.norm(x, ord=1, axis=0), normal(3, 4), seed=9)
    check_vjp(lambda x: tp.ops.norm(x), normal(3, 4), seed=9)


def test_unsupported_gradients_say_so():
    x = tp.tensor(normal(3, 4))
    with tp.GradientTape() as tape:
        tape.watch(x)
        loss = tp.sum(tp.ops.qr(x)[0])
    with pytest.raises(NotImplementedError, match="qr: the gradient"):
        tape.gradient(loss, x)
    x = tp.tensor(normal(4, 3))
    with tp.GradientTape() as tape:
        tape.watch(x)
        loss = tp.sum(tp.ops.svd(x)[0])
    with pytest.raises(NotImplementedError, match="svd: the gradient"):
        tape.gradient(loss, x)


# ======================================================= against keras
@pytest.mark.parametrize(
    "name, call, make",
    [
        ("cholesky", lambda m, x: m.cholesky(x), lambda: spd(n=3)),
        ("cholesky-upper", lambda m, x: m.cholesky(x, upper=True), lambda: spd(n=3)),
        ("cholesky_inverse", lambda m, x: m.cholesky_inverse(np.linalg.cholesky(x)), lambda: spd(n=3)),
        ("det", lambda m, x: m.det(x), lambda: normal(2, 3, 3)),
        ("inv", lambda m, x: m.inv(x), lambda: normal(3, 3)),
        ("solve", lambda m, x: m.solve(x, x[..., :1] * 2.0), lambda: normal(3, 3)),
        (
            "solve_triangular",
            lambda m, x: m.solve_triangular(x, x[:, 0], lower=True),
            lambda: normal(3, 3) + 3 * np.eye(3),
        ),
        ("eigh-values", lambda m, x: m.eigh(x)[0], lambda: spd(n=3)),
        ("svd-values", lambda m, x: m.svd(x, compute_uv=False), lambda: normal(4, 3)),
        ("qr-r-abs", lambda m, x: m.abs(m.qr(x)[1]), lambda: normal(4, 3)),
        ("pinv", lambda m, x: m.pinv(x), lambda: normal(4, 3)),
        ("lstsq", lambda m, x: m.lstsq(x, x[:, :1] + 1.0), lambda: normal(4, 3)),
        ("matrix_rank", lambda m, x: m.matrix_rank(x), lambda: normal(4, 2) @ normal(2, 3)),
        ("norm-fro", lambda m, x: m.norm(x), lambda: normal(3, 3)),
        ("norm-axis", lambda m, x: m.norm(x, ord=1, axis=-1, keepdims=True), lambda: normal(3, 3)),
        ("lu_factor", lambda m, x: m.lu_factor(x)[0], lambda: normal(3, 3)),
        ("lu_factor-pivots", lambda m, x: m.lu_factor(x)[1], lambda: normal(4, 4)),
    ],
)
def test_against_keras(name, call, make):
    x = make().astype(np.float32)
    want = K.convert_to_numpy(call(K, x))
    got = call(tp.ops, x).numpy()
    assert got.dtype == want.dtype, f"{name}: {got.dtype} vs keras {want.dtype}"
    np.testing.assert_allclose(got, want, rtol=2e-4, atol=2e-4)


# ================================================================ frozen
def test_frozen_equals_eager():
    def fn(a, b):
        w, v = tp.ops.eigh(a)
        u, s, vh = tp.ops.svd(b, full_matrices=False)
        return tp.ops.cholesky(a), w, tp.ops.solve(a, b), tp.ops.det(a), s, tp.ops.norm(b, ord="nuc")

    a, b = spd(n=3).astype(np.float32), normal(3, 2).astype(np.float32)
    graph = tp.freeze(fn, tp.TensorSpec((3, 3), "float32"), tp.TensorSpec((3, 2), "float32"))
    for got, want in zip(graph(tp.tensor(a), tp.tensor(b)), fn(tp.tensor(a), tp.tensor(b)), strict=True):
        np.testing.assert_allclose(got.numpy(), want.numpy(), rtol=1e-6)


# ================================================================ errors
def test_bad_input_names_the_function_and_shape():
    with pytest.raises(ValueError, match=r"inv: expected square matrices, got shape \(2, 3\)"):
        tp.ops.inv(np.zeros((2, 3)))
    with pytest.raises(ValueError, match=r"cholesky: expected a matrix \(rank >= 2\), got shape \(3,\)"):
        tp.ops.cholesky(np.zeros(3))
    with pytest.raises(ValueError, match=r"solve: b of shape \(4, 1\) does not fit a of shape \(3, 3\)"):
        tp.ops.solve(np.eye(3), np.zeros((4, 1)))
    with pytest.raises(ValueError, match="qr: mode must be"):
        tp.ops.qr(np.eye(2), mode="r")
    with pytest.raises(ValueError, match="norm: invalid ord 'x'"):
        tp.ops.norm(np.eye(2), ord="x")
    with pytest.raises(NotImplementedError, match="eig: .*complex"):
        tp.ops.eig(np.eye(2))


def test_integers_compute_in_float32():
    assert tp.ops.inv(np.array([[2, 0], [0, 4]])).dtype == tp.float32
    assert linalg.det(np.eye(2, dtype=np.int64)).dtype == tp.float32


def test_frozen_gradients_equal_eager():
    def grads(a):
        with tp.GradientTape() as tape:
            tape.watch(a)
            w, v = tp.ops.eigh(a)
            loss = tp.sum(tp.ops.cholesky(a)) + tp.sum(w * w) + tp.sum(tp.ops.svd(a, compute_uv=False))
        return tape.gradient(loss, a)

    a = spd(n=3)
    graph = tp.freeze(grads, tp.TensorSpec((3, 3), "float64"))
    np.testing.assert_allclose(graph(tp.tensor(a)).numpy(), grads(tp.tensor(a)).numpy(), rtol=1e-12)


def test_jvp_is_the_directional_derivative():
    rng = np.random.default_rng(11)
    a = rng.normal(size=(3, 3)) + 3 * np.eye(3)
    v = rng.normal(size=(3, 3))
    out, tangent = tp.ops.linalg.jvp(tp.ops.linalg.inv, (tp.tensor(a),), (tp.tensor(v),))
    inverse = np.linalg.inv(a)
    np.testing.assert_allclose(out.numpy(), inverse, rtol=1e-10)
    np.testing.assert_allclose(tangent.numpy(), -inverse @ v @ inverse, rtol=1e-8)
    (y, z), (dy, dz), aux = tp.ops.jvp(
        lambda p, q: ((tp.sin(p) * q, tp.sum(p)), "aux"),
        (tp.tensor([0.5, 1.0]), tp.tensor([2.0, 3.0])),
        (tp.tensor([1.0, 0.0]), tp.tensor([0.0, 1.0])),
        has_aux=True,
    )
    np.testing.assert_allclose(dy.numpy(), [np.cos(0.5) * 2.0, np.sin(1.0)], rtol=1e-6)
    assert float(dz) == 1.0 and aux == "aux"
    with pytest.raises(ValueError, match="jvp: a tangent of shape"):
        tp.ops.jvp(tp.exp, (tp.tensor([1.0]),), (tp.tensor([1.0, 2.0]),))


def test_custom_gradient_takes_keras_grad_functions():
    @tp.ops.custom_gradient
    def log1pexp(x):
        e = tp.ops.exp(x)

        def grad(*args, upstream=None):
            if upstream is None:
                (upstream,) = args
            return upstream * (1.0 - 1.0 / (1.0 + e))

        return tp.ops.log(1.0 + e), grad

    x = tp.tensor([100.0, 0.0])
    with tp.GradientTape() as tape:
        tape.watch(x)
        y = tp.sum(log1pexp(x))
    np.testing.assert_allclose(tape.gradient(y, x).numpy(), [1.0, 0.5])
