"""Checks shared by the tests of the Keras op namespaces: finite-difference gradients in
float64 and frozen-equals-eager."""

import numpy as np

import tapeflow as tp


def check_gradients(fn, *arrays, wrt=None, eps=1e-6, rtol=1e-5, atol=1e-6, seed=0):
    """The VJP of `fn` (of float64 arrays) against central differences of <fn(x), cot>."""
    arrays = [np.asarray(a, dtype=np.float64) for a in arrays]
    wrt = range(len(arrays)) if wrt is None else wrt
    xs = [tp.tensor(a) for a in arrays]
    with tp.GradientTape() as tape:
        tape.watch(xs)
        y = fn(*xs)
    cot = np.random.default_rng(seed).standard_normal(y.shape)
    grads = tape.gradient(y, xs, output_gradients=tp.tensor(cot))
    for i in wrt:
        numeric = np.zeros_like(arrays[i])
        flat = numeric.reshape(-1)
        for j in range(arrays[i].size):
            shifted = []
            for sign in (1.0, -1.0):
                a = [b.copy() for b in arrays]
                a[i].reshape(-1)[j] += sign * eps
                shifted.append(np.sum(fn(*[tp.tensor(b) for b in a]).numpy() * cot))
            flat[j] = (shifted[0] - shifted[1]) / (2 * eps)
        got = grads[i]
        got = np.zeros_like(numeric) if got is None else np.asarray(tp.convert_to_tensor(got).numpy())
        np.testing.assert_allclose(got, numeric, rtol=rtol, atol=atol, err_msg=f"gradient of argument {i}")


def check_frozen_equals_eager(fn, *arrays, atol=1e-6):
    """`fn` frozen into a graph gives what it gives eagerly."""
    specs = [tp.TensorSpec(np.shape(a), str(np.asarray(a).dtype)) for a in arrays]
    graph = tp.freeze(fn, *specs)
    eager = fn(*[tp.tensor(a) for a in arrays])
    frozen = graph(*[tp.tensor(a) for a in arrays])
    frozen = frozen[0] if isinstance(frozen, list | tuple) else frozen
    np.testing.assert_allclose(np.asarray(frozen), eager.numpy(), atol=atol)


def check_vjp(fn, *arrays, eps=1e-6, tol=1e-6, seed=3):
    """The tape's gradient of sum(fn(*arrays) * c), for one output or several (one random
    cotangent c each), against central finite differences in float64."""
    xs = [tp.tensor(np.asarray(a, dtype=np.float64)) for a in arrays]
    with tp.GradientTape() as tape:
        tape.watch(xs)
        out = fn(*xs)
        outs = list(out) if isinstance(out, list | tuple) else [out]
    cots = [np.random.default_rng(seed).standard_normal(o.shape) for o in outs]
    grads = tape.gradient(outs, xs, output_gradients=[tp.tensor(c) for c in cots])

    def objective(values):
        res = fn(*[tp.tensor(v) for v in values])
        res = list(res) if isinstance(res, list | tuple) else [res]
        return sum(float(np.sum(r.numpy() * c)) for r, c in zip(res, cots, strict=True))

    for i, g in enumerate(grads):
        base = [np.array(a, dtype=np.float64) for a in arrays]
        fd = np.zeros_like(base[i])
        for j in range(base[i].size):
            plus = [b.copy() for b in base]
            minus = [b.copy() for b in base]
            plus[i].flat[j] += eps
            minus[i].flat[j] -= eps
            fd.flat[j] = (objective(plus) - objective(minus)) / (2 * eps)
        got = np.zeros_like(fd) if g is None else g.numpy()
        np.testing.assert_allclose(got, fd, rtol=tol, atol=tol, err_msg=f"gradient of input {i}")
