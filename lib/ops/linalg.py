"""Keras 3's `keras.ops.linalg`: matrix decompositions, solves, inverses, determinants,
norms and ranks, batched over leading axes.

Each decomposition is a primitive with the standard matrix-calculus gradient (for real
matrices; eigh and svd assume distinct eigen- or singular values). Symmetric inputs
(cholesky, eigh) read the lower triangle forward, as NumPy and torch do, and get a
symmetric gradient. The rest are compositions of these. Integer inputs compute in float32.

>>> import tapeflow as tp
>>> a = tp.tensor([[4.0, 2.0], [2.0, 2.0]])
>>> tp.ops.linalg.cholesky(a).numpy().tolist()
[[2.0, 0.0], [1.0, 1.0]]
>>> tp.ops.linalg.solve(a, tp.tensor([2.0, 1.0])).numpy().tolist()
[0.5, 0.0]
"""

from __future__ import annotations

import numpy as np

from tapeflow import dtypes
from tapeflow.ops import creation, math, reduce, shapes
from tapeflow.ops.core import cast, expand_dims, reshape, squeeze, transpose, unbroadcast
from tapeflow.ops.half import in_float32
from tapeflow.ops.registry import apply, as_tensor, defop
from tapeflow.tensor import Tensor

__all__ = [
    "cholesky",
    "cholesky_inverse",
    "det",
    "eig",
    "eigh",
    "inv",
    "lstsq",
    "lu_factor",
    "matrix_rank",
    "norm",
    "pinv",
    "qr",
    "slogdet",
    "solve",
    "solve_triangular",
    "svd",
]


# ================================================================ helpers
def _matrix(name: str, x, square: bool = False) -> Tensor:
    """`x` as a float tensor of rank >= 2 (integers and bools computed in float32)."""
    x = as_tensor(x, name=name)
    if x.dtype.kind != "f":
        x = cast(x, dtypes.float32)
    if x.ndim < 2:
        raise ValueError(f"{name}: expected a matrix (rank >= 2), got shape {x.shape}")
    if square and x.shape[-1] is not None and x.shape[-2] is not None and x.shape[-1] != x.shape[-2]:
        raise ValueError(f"{name}: expected square matrices, got shape {x.shape}")
    return x


def _square_infer(name: str):
    def check(x):
        if x.dtype.kind != "f":
            raise TypeError(f"{name}: expected a floating-point tensor, got {x.dtype}")
        if len(x.shape) < 2 or (None not in x.shape[-2:] and x.shape[-1] != x.shape[-2]):
            raise ValueError(f"{name}: expected square matrices (shape (..., n, n)), got shape {x.shape}")
        return tuple(x.shape)

    return check


def _mT(t: Tensor) -> Tensor:
    perm = list(range(t.ndim))
    perm[-1], perm[-2] = perm[-2], perm[-1]
    return transpose(t, tuple(perm))


def _sym(t: Tensor) -> Tensor:
    return (t + _mT(t)) * 0.5


def _mm(a: Tensor, b: Tensor) -> Tensor:
    return math.matmul(a, b)


def _eye_like(n: int, like: Tensor) -> Tensor:
    return creation.eye(n, dtype=like.dtype, device=like.device)


def _band(t: Tensor, lower: bool, strict: bool = False) -> Tensor:
    """The lower (or upper) triangle of the last two axes, the diagonal left out when `strict`."""
    n, m = t.shape[-2], t.shape[-1]
    mask = np.tri(n, m, -1 if strict else 0, dtype=bool)
    if not lower:
        mask = np.tri(n, m, 0 if strict else -1, dtype=bool) == 0
    return math.where(creation.tensor(mask, device=t.device), t, creation.zeros((), t.dtype, device=t.device))


def _diag_embed(v: Tensor) -> Tensor:
    """Square matrices with `v` on the diagonal."""
    return expand_dims(v, -1) * _eye_like(v.shape[-1], v)


def _diag_part(t: Tensor) -> Tensor:
    n = t.shape[-1]
    return reduce.sum(t * _eye_like(n, t), -1)


def _off_diagonal_reciprocal(d: Tensor) -> Tensor:
    """1 / d off the diagonal, 0 on it."""
    eye = creation.tensor(np.eye(d.shape[-1], dtype=bool), device=d.device)
    zero, one = creation.zeros((), d.dtype, device=d.device), creation.ones((), d.dtype, device=d.device)
    return math.where(eye, zero, 1.0 / math.where(eye, one, d))


# ================================================================ cholesky
def _cholesky_infer(x):
    return [(_square_infer("cholesky")(x), x.dtype)]


def _cholesky_vjp(gs, xs, ys):
    lower, g = ys[0], gs[0]
    inner = _band(_mm(_mT(lower), g), lower=True)
    phi = inner - 0.5 * _diag_embed(_diag_part(inner))
    left = apply(_SOLVE_TRIANGULAR, (_mT(lower), phi), {"lower": False})  # L^-T phi
    return (_sym(_mT(apply(_SOLVE_TRIANGULAR, (_mT(lower), _mT(left)), {"lower": False}))),)


@defop("cholesky", infer=_cholesky_infer, vjp=_cholesky_vjp)
def _CHOLESKY(x):
    """The lower Cholesky factor L of symmetric positive-definite matrices (x = L L^T),
    read from the lower triangle."""
    return np.linalg.cholesky(x)


def cholesky(x, upper=False) -> Tensor:
    """The Cholesky factor of symmetric positive-definite matrices: lower L with x = L L^T,
    or upper U = L^T with x = U^T U when `upper`.

    >>> import tapeflow as tp
    >>> tp.ops.cholesky(tp.tensor([[4.0, 2.0], [2.0, 2.0]])).numpy().tolist()
    [[2.0, 0.0], [1.0, 1.0]]
    """
    lower = apply(_CHOLESKY, (_matrix("cholesky", x, square=True),), {})
    return _mT(lower) if upper else lower


def cholesky_inverse(x, upper=False) -> Tensor:
    """The inverse of a matrix from its Cholesky factor: (L L^T)^-1 for a lower factor, or
    (U^T U)^-1 for an upper one.

    >>> import tapeflow as tp
    >>> tp.ops.linalg.cholesky_inverse(tp.tensor([[2.0, 0.0], [1.0, 1.0]])).numpy().tolist()
    [[0.5, -0.5], [-0.5, 1.0]]
    """
    factor = _matrix("cholesky_inverse", x, square=True)
    eye = _eye_like(factor.shape[-1], factor)
    inverse = solve_triangular(factor, eye, lower=not upper)  # L^-1 or U^-1
    return _mm(_mT(inverse), inverse) if not upper else _mm(inverse, _mT(inverse))


# ============================================================= triangular
def _solve_infer(name: str):
    def infer(a, b, **_):
        _square_infer(name)(a)
        if b.dtype is not a.dtype:
            raise TypeError(f"{name}: a and b have dtypes {a.dtype} and {b.dtype}")
        if len(b.shape) < 2 or (None not in (a.shape[-1], b.shape[-2]) and a.shape[-1] != b.shape[-2]):
            raise ValueError(f"{name}: b of shape {b.shape} does not fit a of shape {a.shape}")
        batch = shapes.broadcast(name, a.shape[:-2], b.shape[:-2])
        return [(batch + tuple(b.shape[-2:]), a.dtype)]

    return infer


def _triangle(a, lower: bool):
    return np.tril(a) if lower else np.triu(a)


def _solve_triangular_vjp(gs, xs, ys, lower):
    a, b = xs
    gb = apply(_SOLVE_TRIANGULAR, (_mT(a), gs[0]), {"lower": not lower})
    ga = _band(-_mm(gb, _mT(ys[0])), lower=lower)
    return unbroadcast(ga, a.shape), unbroadcast(gb, b.shape)


@defop("solve_triangular", infer=_solve_infer("solve_triangular"), vjp=_solve_triangular_vjp)
def _SOLVE_TRIANGULAR(a, b, lower):
    """x with T x = b, T the lower (or upper) triangle of `a` (the other entries unread)."""
    return np.linalg.solve(_triangle(a, lower), b)


def _solve_vjp(gs, xs, ys):
    a, b = xs
    gb = apply(_SOLVE, (_mT(a), gs[0]), {})
    return unbroadcast(-_mm(gb, _mT(ys[0])), a.shape), unbroadcast(gb, b.shape)


@defop("solve", infer=_solve_infer("solve"), vjp=_solve_vjp)
def _SOLVE(a, b):
    """x with a x = b, for matrices b (..., n, k); the batch shapes broadcast first (CuPy's
    solve does not broadcast them)."""
    batch = np.broadcast_shapes(a.shape[:-2], b.shape[:-2])
    return np.linalg.solve(np.broadcast_to(a, batch + a.shape[-2:]), np.broadcast_to(b, batch + b.shape[-2:]))


def _solve_operands(name: str, a, b) -> tuple:
    """(a, b as matrices, whether b was a vector); b is a vector when it has rank 1, or one
    less than a with a's batch shape (as torch and Keras read it)."""
    a = _matrix(name, a, square=True)
    b = as_tensor(b, name=name)
    common = dtypes.result_type(a.dtype, b.dtype)
    a, b = cast(a, common), cast(b, common)
    vector = b.ndim == 1 or (b.ndim == a.ndim - 1 and tuple(b.shape) == tuple(a.shape[:-1]))
    if b.ndim == 0:
        raise ValueError(f"{name}: b must be a vector or a matrix, got a scalar")
    return a, expand_dims(b, -1) if vector else b, vector


def solve(a, b) -> Tensor:
    """x with a @ x = b, for square `a`; `b` is a vector (..., n) or matrices (..., n, k).

    >>> import tapeflow as tp
    >>> tp.ops.solve(tp.tensor([[2.0, 0.0], [0.0, 4.0]]), tp.tensor([2.0, 2.0])).numpy().tolist()
    [1.0, 0.5]
    """
    a, b, vector = _solve_operands("solve", a, b)
    x = apply(_SOLVE, (a, b), {})
    return squeeze(x, -1) if vector else x


def solve_triangular(a, b, lower=False) -> Tensor:
    """x with T @ x = b, where T is the upper triangle of `a` (the lower one when `lower`);
    `b` is a vector (..., n) or matrices (..., n, k).

    >>> import tapeflow as tp
    >>> tp.ops.solve_triangular(tp.tensor([[2.0, 9.0], [1.0, 4.0]]), tp.tensor([2.0, 3.0]), lower=True).numpy().tolist()
    [1.0, 0.5]
    """
    a, b, vector = _solve_operands("solve_triangular", a, b)
    x = apply(_SOLVE_TRIANGULAR, (a, b), {"lower": bool(lower)})
    return squeeze(x, -1) if vector else x


# ===================================================== inverse, determinant
def _inv_infer(x):
    return [(_square_infer("inv")(x), x.dtype)]


def _inv_vjp(gs, xs, ys):
    y = _mT(ys[0])
    return (-_mm(_mm(y, gs[0]), y),)


@defop("inv", infer=_inv_infer, vjp=_inv_vjp)
def _INV(x):
    """The inverse of square matrices."""
    return np.linalg.inv(x)


def inv(x) -> Tensor:
    """The inverse of square matrices.

    >>> import tapeflow as tp
    >>> tp.ops.inv(tp.tensor([[2.0, 0.0], [0.0, 4.0]])).numpy().tolist()
    [[0.5, 0.0], [0.0, 0.25]]
    """
    return apply(_INV, (_matrix("inv", x, square=True),), {})


def _det_infer(x):
    return [(_square_infer("det")(x)[:-2], x.dtype)]


def _det_vjp(gs, xs, ys):
    scale = expand_dims(expand_dims(gs[0] * ys[0], -1), -1)
    return (scale * _mT(apply(_INV, (xs[0],), {})),)


@defop("det", infer=_det_infer, vjp=_det_vjp)
def _DET(x):
    """The determinant of square matrices."""
    return np.linalg.det(x)


def det(x) -> Tensor:
    """The determinant of square matrices.

    >>> import tapeflow as tp
    >>> tp.ops.det(tp.tensor([[2.0, 1.0], [1.0, 3.0]])).numpy().round(6).item()
    5.0
    """
    return apply(_DET, (_matrix("det", x, square=True),), {})


def _slogdet_infer(x):
    batch = _square_infer("slogdet")(x)[:-2]
    return [(batch, x.dtype), (batch, x.dtype)]


def _slogdet_vjp(gs, xs, ys):
    if gs[1] is None:
        return (None,)
    return (expand_dims(expand_dims(gs[1], -1), -1) * _mT(apply(_INV, (xs[0],), {})),)


@defop("slogdet", infer=_slogdet_infer, vjp=_slogdet_vjp, num_outputs=2)
def _SLOGDET(x):
    """The sign of the determinant and the log of its absolute value."""
    sign, logabs = np.linalg.slogdet(x)
    return sign.astype(x.dtype), logabs.astype(x.dtype)


def slogdet(x) -> tuple[Tensor, Tensor]:
    """(sign, log|det|) of square matrices: the determinant without overflow.

    >>> import tapeflow as tp
    >>> sign, logabs = tp.ops.slogdet(tp.tensor([[-2.0, 0.0], [0.0, 1.0]]))
    >>> sign.item(), round(logabs.item(), 4)
    (-1.0, 0.6931)
    """
    return apply(_SLOGDET, (_matrix("slogdet", x, square=True),), {})


# =================================================================== eigh
def _eigh_infer(x):
    shape = _square_infer("eigh")(x)
    return [(shape[:-1], x.dtype), (shape, x.dtype)]


def _eigh_vjp(gs, xs, ys):
    w, v = ys
    gw, gv = gs
    inner = _diag_embed(gw) if gw is not None else creation.zeros((), v.dtype, device=v.device)
    if gv is not None:
        gaps = _off_diagonal_reciprocal(expand_dims(w, -2) - expand_dims(w, -1))  # 1 / (w_j - w_i)
        inner = inner + gaps * _mm(_mT(v), gv)
    return (_sym(_mm(_mm(v, inner), _mT(v))),)


@defop("eigh", infer=_eigh_infer, vjp=_eigh_vjp, num_outputs=2)
def _EIGH(x):
    """Eigenvalues (ascending) and eigenvectors (columns) of symmetric matrices, read from
    the lower triangle."""
    w, v = np.linalg.eigh(x)
    return w, v


def eigh(x) -> tuple[Tensor, Tensor]:
    """The eigenvalues (ascending) and eigenvectors (the columns of v) of symmetric
    matrices: x = v @ diag(w) @ v^T. Only the lower triangle is read.

    >>> import tapeflow as tp
    >>> w, v = tp.ops.eigh(tp.tensor([[2.0, 1.0], [1.0, 2.0]]))
    >>> w.numpy().round(4).tolist()
    [1.0, 3.0]
    """
    return apply(_EIGH, (_matrix("eigh", x, square=True),), {})


def eig(x):
    """Eigenvalues and eigenvectors of general square matrices: complex in general, and
    tapeflow has no complex dtype, so this raises NotImplementedError (use `eigh` for
    symmetric matrices).

    >>> import tapeflow as tp
    >>> tp.ops.eig(tp.eye(2))
    Traceback (most recent call last):
    ...
    NotImplementedError: eig: the eigen-decomposition of a general matrix (shape (2, 2)) is complex, ...
    """
    raise NotImplementedError(
        f"eig: the eigen-decomposition of a general matrix (shape {np.shape(x)}) is complex, and tapeflow has no "
        "complex dtype; use eigh for symmetric matrices"
    )


# ===================================================================== qr
def _qr_infer(x, mode):
    if x.dtype.kind != "f":
        raise TypeError(f"qr: expected a floating-point tensor, got {x.dtype}")
    if len(x.shape) < 2:
        raise ValueError(f"qr: expected a matrix (rank >= 2), got shape {x.shape}")
    *batch, m, n = x.shape
    k = m if mode == "complete" or m is None or n is None else min(m, n)
    return [((*batch, m, k), x.dtype), ((*batch, k, n), x.dtype)]


def _qr_vjp(gs, xs, ys, mode):
    q, r = ys
    m, n = xs[0].shape[-2:]
    if m < n or (mode == "complete" and m > n):
        raise NotImplementedError(
            f"qr: the gradient is implemented for mode='reduced' with m >= n, got mode={mode!r} and shape {xs[0].shape}"
        )
    gq = gs[0] if gs[0] is not None else creation.zeros((), q.dtype, device=q.device) * q
    gr = gs[1] if gs[1] is not None else creation.zeros((), r.dtype, device=r.device) * r
    qgq = _mm(_mT(q), gq)
    rgr = _mm(r, _mT(gr))
    lower = _band(qgq - _mT(qgq) + rgr - _mT(rgr), lower=True)
    # (x) R^-T, as the transpose of R^-1 x^T
    left = gr + _mT(apply(_SOLVE_TRIANGULAR, (r, _mT(lower)), {"lower": False}))
    right = _mT(apply(_SOLVE_TRIANGULAR, (r, _mT(gq - _mm(q, qgq))), {"lower": False}))
    return (_mm(q, left) + right,)


@defop("qr", infer=_qr_infer, vjp=_qr_vjp, num_outputs=2)
def _QR(x, mode):
    """Q (orthonormal columns) and upper-triangular R with x = Q R."""
    q, r = np.linalg.qr(x, mode=mode)
    return q, r


def qr(x, mode="reduced") -> tuple[Tensor, Tensor]:
    """The QR decomposition x = q @ r: `mode` "reduced" gives q (m, k) and r (k, n) with
    k = min(m, n); "complete" gives q (m, m) and r (m, n).

    >>> import tapeflow as tp
    >>> q, r = tp.ops.qr(tp.ones((3, 2)))
    >>> q.shape, r.shape
    ((3, 2), (2, 2))
    """
    if mode not in ("reduced", "complete"):
        raise ValueError(f"qr: mode must be 'reduced' or 'complete', got {mode!r}")
    return apply(_QR, (_matrix("qr", x),), {"mode": mode})


# ==================================================================== svd
def _svd_infer(x, full_matrices):
    if x.dtype.kind != "f":
        raise TypeError(f"svd: expected a floating-point tensor, got {x.dtype}")
    if len(x.shape) < 2 or None in x.shape[-2:]:
        raise ValueError(f"svd: expected matrices of known size (shape (..., m, n)), got shape {x.shape}")
    *batch, m, n = x.shape
    k = min(m, n)
    mu, nv = (m, n) if full_matrices else (k, k)
    return [((*batch, m, mu), x.dtype), ((*batch, k), x.dtype), ((*batch, nv, n), x.dtype)]


def _svd_vjp(gs, xs, ys, full_matrices):
    u, s, vh = ys
    gu, gs_, gvh = gs
    m, n = xs[0].shape[-2:]
    if full_matrices and m != n and (gu is not None or gvh is not None):
        raise NotImplementedError(
            f"svd: the gradient of u or vh with full_matrices=True is not unique for a non-square matrix (shape "
            f"{xs[0].shape}); use full_matrices=False"
        )
    v = _mT(vh)
    inner = _diag_embed(gs_) if gs_ is not None else creation.zeros((), s.dtype, device=s.device)
    s_row, s_col = expand_dims(s, -2), expand_dims(s, -1)
    gaps = _off_diagonal_reciprocal(s_row * s_row - s_col * s_col)  # 1 / (s_j^2 - s_i^2)
    extra = None
    if gu is not None:
        utgu = _mm(_mT(u), gu)
        inner = inner + (gaps * (utgu - _mT(utgu))) * s_row
        if m > n:  # the part of gu outside the span of u
            extra = _mm(gu - _mm(u, utgu), _mT(v) / s_col)
    if gvh is not None:
        gv = _mT(gvh)
        vtgv = _mm(_mT(v), gv)
        inner = inner + s_col * (gaps * (vtgv - _mT(vtgv)))
        if n > m:
            part = _mm(u / s_row, _mT(gv - _mm(v, vtgv)))
            extra = part if extra is None else extra + part
    ga = _mm(_mm(u, inner), vh)
    return (ga if extra is None else ga + extra,)


@defop("svd", infer=_svd_infer, vjp=_svd_vjp, num_outputs=3)
def _SVD(x, full_matrices):
    """u, s (descending) and vh with x = u @ diag(s) @ vh."""
    u, s, vh = np.linalg.svd(x, full_matrices=full_matrices)
    return u, s, vh


def svd(x, full_matrices=True, compute_uv=True):
    """The singular value decomposition x = u @ diag(s) @ vh (s descending); with
    `compute_uv=False`, s alone. The gradient assumes distinct singular values.

    >>> import tapeflow as tp
    >>> tp.ops.svd(tp.tensor([[3.0, 0.0], [0.0, -2.0]]), compute_uv=False).numpy().tolist()
    [3.0, 2.0]
    """
    x = _matrix("svd", x)
    u, s, vh = apply(_SVD, (x,), {"full_matrices": bool(full_matrices) and bool(compute_uv)})
    return (u, s, vh) if compute_uv else s


def _singular_values(name: str, x) -> Tensor:
    return apply(_SVD, (_matrix(name, x),), {"full_matrices": False})[1]


def _pinv(name: str, x: Tensor, rcond) -> Tensor:
    u, s, vh = apply(_SVD, (x,), {"full_matrices": False})
    m, n = x.shape[-2:]
    rcond = max(m, n) * float(np.finfo(x.dtype.np).eps) if rcond is None else float(rcond)
    keep = s > reduce.max(s, -1, keepdims=True) * rcond
    one, zero = creation.ones((), s.dtype, device=s.device), creation.zeros((), s.dtype, device=s.device)
    inv_s = math.where(keep, 1.0 / math.where(keep, s, one), zero)
    return _mm(_mT(vh) * expand_dims(inv_s, -2), _mT(u))


def pinv(x, rcond=None) -> Tensor:
    """The Moore-Penrose pseudo-inverse, singular values below `rcond` times the largest
    (default max(m, n) * eps) counted as zero.

    >>> import tapeflow as tp
    >>> tp.ops.pinv(tp.tensor([[2.0, 0.0], [0.0, 0.0]])).numpy().tolist()
    [[0.5, 0.0], [0.0, 0.0]]
    """
    return _pinv("pinv", _matrix("pinv", x), rcond)


def lstsq(a, b, rcond=None) -> Tensor:
    """The least-squares solution x of a @ x = b (minimum norm where a is rank deficient);
    `b` is a vector (m,) or a matrix (m, k).

    >>> import tapeflow as tp
    >>> tp.ops.lstsq(tp.tensor([[1.0], [1.0]]), tp.tensor([1.0, 3.0])).numpy().round(4).tolist()
    [2.0]
    """
    a = _matrix("lstsq", a)
    b = as_tensor(b, name="lstsq")
    common = dtypes.result_type(a.dtype, b.dtype)
    a, b = cast(a, common), cast(b, common)
    if b.ndim not in (a.ndim - 1, a.ndim) or (a.shape[-2] is not None and b.shape[a.ndim - 2] != a.shape[-2]):
        raise ValueError(f"lstsq: b of shape {b.shape} does not fit a of shape {a.shape}")
    if rcond is None:
        rcond = float(np.finfo(a.dtype.np).eps) * max(a.shape[-2:])
    vector = b.ndim == a.ndim - 1
    x = _mm(_pinv("lstsq", a, rcond), expand_dims(b, -1) if vector else b)
    return squeeze(x, -1) if vector else x


def matrix_rank(x, tol=None) -> Tensor:
    """The number of singular values above `tol` (default: the largest times max(m, n) * eps),
    as int32.

    >>> import tapeflow as tp
    >>> tp.ops.matrix_rank(tp.tensor([[1.0, 2.0], [2.0, 4.0]])).item()
    1
    """
    x = _matrix("matrix_rank", x)
    s = _singular_values("matrix_rank", x)
    if tol is None:
        tol = reduce.max(s, -1, keepdims=True) * (max(x.shape[-2:]) * float(np.finfo(x.dtype.np).eps))
    return reduce.sum(cast(s > tol, dtypes.int32), -1)


# ============================================================= lu_factor
def _lu_infer(x):
    shape = _square_infer("lu_factor")(x)
    return [(shape, x.dtype), (shape[:-1], dtypes.int32)]


@defop("lu_factor", infer=_lu_infer, num_outputs=2)
def _LU_FACTOR(x):
    """LU with partial pivoting, packed as LAPACK's getrf: L (unit diagonal, below) and U in
    one matrix, and the 0-based row swapped with each row in turn."""
    batch, n = x.shape[:-2], x.shape[-1]
    lu = x.reshape((-1, n, n)).copy()
    rows = np.arange(lu.shape[0])
    piv = np.zeros(lu.shape[:2], dtype=np.int32)
    for k in range(n):  # one column at a time, every matrix of the batch at once
        p = k + np.argmax(np.abs(lu[:, k:, k]), axis=1)
        piv[:, k] = p
        top, chosen = lu[rows, k].copy(), lu[rows, p].copy()
        lu[rows, k], lu[rows, p] = chosen, top
        pivot = lu[:, k, k]
        safe = np.where(pivot == 0, 1, pivot)
        lu[:, k + 1 :, k] /= safe[:, None]
        lu[:, k + 1 :, k + 1 :] -= lu[:, k + 1 :, k, None] * lu[:, k, None, k + 1 :]
    return lu.reshape(x.shape), piv.reshape((*batch, n))


def lu_factor(x) -> tuple[Tensor, Tensor]:
    """The LU factorization with partial pivoting of square matrices, as (lu, pivots): L
    (unit diagonal, below the diagonal) and U packed in one matrix, and for each row i the
    0-based row it was swapped with (not differentiable).

    >>> import tapeflow as tp
    >>> lu, piv = tp.ops.lu_factor(tp.tensor([[1.0, 2.0], [3.0, 4.0]]))
    >>> piv.numpy().tolist()
    [1, 1]
    """
    return apply(_LU_FACTOR, (_matrix("lu_factor", x, square=True),), {})


# ================================================================== norm
def _vector_norm(x: Tensor, ord, axis: tuple, keepdims: bool) -> Tensor:
    a = math.abs(x)
    if ord is None or ord == 2:
        return math.sqrt(reduce.sum(x * x, axis, keepdims))
    if ord == float("inf"):
        return reduce.max(a, axis, keepdims)
    if ord == float("-inf"):
        return reduce.min(a, axis, keepdims)
    if ord == 0:
        return reduce.sum(cast(math.not_equal(x, 0), x.dtype), axis, keepdims)
    if ord == 1:
        return reduce.sum(a, axis, keepdims)
    if isinstance(ord, str):
        raise ValueError(f"norm: ord={ord!r} is a matrix norm; it needs a 2-tuple axis")
    p = float(ord)
    return reduce.sum(a**p, axis, keepdims) ** (1.0 / p)


def _matrix_norm(x: Tensor, ord, axis: tuple, keepdims: bool) -> Tensor:
    r, c = axis
    if ord in (None, "fro"):
        return math.sqrt(reduce.sum(x * x, axis, keepdims))
    if ord in (1, -1, float("inf"), float("-inf")):
        sum_axis, over = (r, c) if ord in (1, -1) else (c, r)
        sums = reduce.sum(math.abs(x), sum_axis, keepdims=True)
        pick = reduce.max if ord > 0 else reduce.min
        out = pick(sums, over, keepdims=True)
        return out if keepdims else squeeze(out, axis)
    if ord in ("nuc", 2, -2):
        rest = [i for i in range(x.ndim) if i not in axis]
        s = _singular_values("norm", transpose(x, (*rest, r, c)))
        out = reduce.sum(s, -1) if ord == "nuc" else (reduce.max(s, -1) if ord == 2 else reduce.min(s, -1))
        if keepdims:
            for a in sorted(axis):
                out = expand_dims(out, a)
        return out
    raise ValueError(f"norm: invalid ord {ord!r} for a matrix norm")


@in_float32
def norm(x, ord=None, axis=None, keepdims=False) -> Tensor:
    """A vector norm (axis an int, or None for a vector) or a matrix norm (axis a pair, or
    None for a matrix), as NumPy's `linalg.norm`: ord None/2, 1, inf, -inf, 0 or p for
    vectors; None/"fro", "nuc", 1, -1, 2, -2, inf, -inf for matrices. Integers give float32.

    >>> import tapeflow as tp
    >>> tp.ops.norm(tp.tensor([3.0, 4.0])).item()
    5.0
    >>> tp.ops.norm(tp.tensor([[1.0, -2.0], [3.0, 4.0]]), ord=1).item()
    6.0
    """
    x = as_tensor(x, name="norm")
    if x.dtype.kind != "f":
        x = cast(x, dtypes.float32)
    if axis is None:
        if ord is not None and x.ndim not in (1, 2):
            raise ValueError(f"norm: ord={ord!r} with axis=None needs a vector or a matrix, got shape {x.shape}")
        if ord is None:
            out = math.sqrt(reduce.sum(x * x))
            return reshape(out, (1,) * x.ndim) if keepdims else out
        axis = tuple(range(x.ndim))
    axes = (axis,) if isinstance(axis, int) else tuple(axis)
    norm_axes = tuple(shapes.normalize_axis("norm", a, x.ndim) for a in axes)
    if len(norm_axes) == 1:
        return _vector_norm(x, ord, norm_axes, bool(keepdims))
    if len(norm_axes) == 2 and norm_axes[0] != norm_axes[1]:
        return _matrix_norm(x, ord, norm_axes, bool(keepdims))
    raise ValueError(f"norm: axis must be an int or a pair of distinct ints, got {axis!r}")
