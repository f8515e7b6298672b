"""CUDA C for CuPy ElementwiseKernels: fused elementwise programs and optimizer updates.

Pure Python, so that the same text the GPU backend compiles can be compiled for the host
and checked against the NumPy references without a GPU. Each kernel computes in its own
float type, one statement per step, in the references' order of operations; constants are
literals that round-trip exactly. Kernels are compiled with `OPTIONS` (no contraction into
fused multiply-adds, so every add, multiply, divide and sqrt rounds as NumPy's does; CuPy
adds flush-to-zero of float32 subnormals, as the CPU backend's numerics do).

>>> src = fused_elementwise((("input", 0), ("const", 1.5), ("multiply", 0, 1), ("relu", 2)), 1, "float32")
>>> src.in_params, src.out_params
('float32 tf_in0', 'float32 tf_out')
>>> print(src.operation)
const float r0 = tf_in0;
const float r1 = 1.5e+00f;
const float r2 = r0 * r1;
const float r3 = tf_relu(r2);
tf_out = r3;
"""

from __future__ import annotations

import dataclasses
import functools
import hashlib
import re
from dataclasses import dataclass

import numpy as np

from tapeflow._kernels.fusion_opcodes import ARITY

CTYPES = {"float32": "float", "float64": "double"}
# Types a 0-d device scalar (learning rate, step) may have: the kernel reads it as it is, so that
# no conversion runs before each launch.
SCALAR_CTYPES = {**CTYPES, "int32": "int", "int64": "long long"}
_FLOAT64_SCALARS = ("float64", "float64")
OPTIONS = ("--fmad=false",)
_BITS = {"float32": (np.uint32, "__int_as_float({:#x})"), "float64": (np.uint64, "__longlong_as_double({:#x}LL)")}


@dataclass(frozen=True)
class KernelSource:
    """The parts of one ElementwiseKernel. `inputs` and `outputs` are (dtype name, parameter
    name, raw) triples; raw inputs (0-d device scalars) are read once, in `loop_prep`."""

    name: str
    inputs: tuple
    outputs: tuple
    operation: str
    preamble: str = ""
    loop_prep: str = ""

    @property
    def in_params(self) -> str:
        return ", ".join(f"{'raw ' if raw else ''}{dtype} {name}" for dtype, name, raw in self.inputs)

    @property
    def out_params(self) -> str:
        return ", ".join(f"{dtype} {name}" for dtype, name, _ in self.outputs)


def literal(value, dtype: str) -> str:
    """`value` rounded to `dtype` as a C expression of that type: a decimal literal that parses
    back to the same number, or for inf and NaN a bit pattern (NVRTC has no INFINITY).

    >>> literal(0.1, "float32"), literal(-0.0, "float64"), literal(float("-inf"), "float32")
    ('1.e-01f', '-0.e+00', '-__int_as_float(0x7f800000)')
    """
    with np.errstate(over="ignore"):
        x = np.dtype(dtype).type(value)
    if np.isfinite(x):
        text = np.format_float_scientific(x, unique=True)
        return text + "f" if dtype == "float32" else text
    uint, pattern = _BITS[dtype]
    magnitude = pattern.format(int(np.abs(x).view(uint)))
    return "-" + magnitude if np.signbit(x) else magnitude


def _math(dtype: str) -> dict:
    """The C math function names of a float type."""
    suffix = "f" if dtype == "float32" else ""
    return {name: name + suffix for name in ("exp", "log", "tanh", "sqrt", "fabs")}


def preamble(dtype: str) -> str:
    """Helpers with NumPy's meaning: maximum and minimum propagate NaN (and give the second
    operand on a tie of 0.0 and -0.0), relu keeps NaN and turns -0.0 into 0.0, sigmoid never
    overflows."""
    t, f = CTYPES[dtype], _math(dtype)
    zero, one = literal(0.0, dtype), literal(1.0, dtype)
    return (
        f"__device__ __forceinline__ {t} tf_maximum({t} u, {t} v) {{ return (u > v || u != u) ? u : v; }}\n"
        f"__device__ __forceinline__ {t} tf_minimum({t} u, {t} v) {{ return (u < v || u != u) ? u : v; }}\n"
        f"__device__ __forceinline__ {t} tf_relu({t} x) {{ return (x > {zero} || x != x) ? x : {zero}; }}\n"
        f"__device__ __forceinline__ {t} tf_sigmoid({t} x) {{\n"
        f"    if (x >= {zero}) return {one} / ({one} + {f['exp']}(-x));\n"
        f"    const {t} e = {f['exp']}(x);\n"
        f"    return e / ({one} + e);\n"
        "}\n"
    )


def _expression(op: str, args: list, dtype: str) -> str:
    f, one = _math(dtype), literal(1.0, dtype)
    a = args[0]
    if ARITY[op] == 2:
        b = args[1]
        infix = {"add": "+", "subtract": "-", "multiply": "*", "divide": "/"}
        return f"{a} {infix[op]} {b}" if op in infix else f"tf_{op}({a}, {b})"
    unary = {
        "neg": f"-{a}",
        "exp": f"{f['exp']}({a})",
        "log": f"{f['log']}({a})",
        "tanh": f"{f['tanh']}({a})",
        "sigmoid": f"tf_sigmoid({a})",
        "relu": f"tf_relu({a})",
        "sqrt": f"{f['sqrt']}({a})",
        "square": f"{a} * {a}",
        "abs": f"{f['fabs']}({a})",
        "reciprocal": f"{one} / {a}",
        "rsqrt": f"{one} / {f['sqrt']}({a})",
    }
    return unary[op]


def _name(prefix: str, text: str) -> str:
    return f"{prefix}_{hashlib.sha1(text.encode()).hexdigest()[:12]}"


def fused_elementwise(program: tuple, n_inputs: int, dtype: str) -> KernelSource:
    """The kernel of a `fused_elementwise` program (already checked) on `n_inputs` inputs of
    `dtype` ("float32" or "float64"): inputs `tf_in<i>`, output `tf_out`, one register per
    instruction."""
    t = CTYPES[dtype]
    lines = []
    for k, ins in enumerate(program):
        if ins[0] == "input":
            value = f"tf_in{ins[1]}"
        elif ins[0] == "const":
            value = literal(ins[1], dtype)
        else:
            value = _expression(ins[0], [f"r{a}" for a in ins[1:]], dtype)
        lines.append(f"const {t} r{k} = {value};")
    lines.append(f"tf_out = r{len(program) - 1};")
    operation = "\n".join(lines)
    inputs = tuple((dtype, f"tf_in{i}", False) for i in range(n_inputs))
    return KernelSource(
        _name("tapeflow_fused", operation), inputs, ((dtype, "tf_out", False),), operation, preamble(dtype)
    )


def relu_grad(dtype: str) -> KernelSource:
    """`tapeflow`'s relu_grad for `dtype`: the gradient tf_g where tf_y > 0, else 0 (a NaN in
    tf_y gives 0); output tf_out.

    >>> print(relu_grad("float32").operation)
    tf_out = tf_y > 0.e+00f ? tf_g : 0.e+00f;
    """
    zero = literal(0.0, dtype)
    operation = f"tf_out = tf_y > {zero} ? tf_g : {zero};"
    inputs = ((dtype, "tf_g", False), (dtype, "tf_y", False))
    return KernelSource(_name("tapeflow_relu_grad", operation), inputs, ((dtype, "tf_out", False),), operation)


def adam_update(
    dtype: str,
    beta1: float,
    beta2: float,
    epsilon: float,
    epsilon_on_sqrt_v: bool,
    scalars: tuple = _FLOAT64_SCALARS,
) -> KernelSource:
    """The Adam step of `tapeflow.ops.optim.adam_update` for parameters of `dtype`: inputs
    tf_param, tf_m, tf_v, tf_grad and the 0-d device scalars tf_lr and tf_step of the types
    `scalars` (in `SCALAR_CTYPES`; read once per thread, as float64, never on the host);
    outputs tf_param_out, tf_m_out, tf_v_out.

    As the reference: the moments in `dtype` with the betas rounded to it, the bias corrections
    computed in float64 and rounded to it, and with `epsilon_on_sqrt_v` the denominator and the
    step in float64 (the reference's epsilon is a float64 scalar there).
    """
    t, f = CTYPES[dtype], _math(dtype)
    c = functools.partial(literal, dtype=dtype)
    beta2_64 = literal(beta2, "float64")
    prep = [
        "const double tf_s = (double)tf_step[0];",
        f"const {t} tf_lr_t = ({t})tf_lr[0];",
        f"const {t} tf_bias1 = ({t})(1.0 - pow({literal(beta1, 'float64')}, tf_s));",
        f"const {t} tf_bias2 = ({t})(1.0 - pow({beta2_64}, tf_s));",
    ]
    body = [
        f"const {t} tf_m_new = {c(beta1)} * tf_m + {c(1.0 - beta1)} * tf_grad;",
        f"const {t} tf_v_new = {c(beta2)} * tf_v + {c(1.0 - beta2)} * tf_grad * tf_grad;",
        f"const {t} tf_m_hat = tf_m_new / tf_bias1;",
        f"const {t} tf_v_hat = tf_v_new / tf_bias2;",
    ]
    if epsilon_on_sqrt_v:
        prep.append(f"const double tf_eps = {literal(epsilon, 'float64')} / sqrt(1.0 - pow({beta2_64}, tf_s));")
        body.append(
            f"tf_param_out = ({t})((double)tf_param - (double)(tf_lr_t * tf_m_hat) / "
            f"((double){f['sqrt']}(tf_v_hat) + tf_eps));"
        )
    else:
        body.append(f"tf_param_out = tf_param - tf_lr_t * tf_m_hat / ({f['sqrt']}(tf_v_hat) + {c(epsilon)});")
    body += ["tf_m_out = tf_m_new;", "tf_v_out = tf_v_new;"]
    operation, loop_prep = "\n".join(body), "\n".join(prep)
    inputs = (
        *((dtype, name, False) for name in ("tf_param", "tf_m", "tf_v", "tf_grad")),
        (scalars[0], "tf_lr", True),
        (scalars[1], "tf_step", True),
    )
    outputs = tuple((dtype, name, False) for name in ("tf_param_out", "tf_m_out", "tf_v_out"))
    name = _name("tapeflow_adam", _typed(scalars) + loop_prep + operation)
    return KernelSource(name, inputs, outputs, operation, "", loop_prep)


def _typed(scalars: tuple) -> str:
    """The scalars' types as text for a kernel's name (none for the float64 default)."""
    return "" if tuple(scalars) == _FLOAT64_SCALARS[: len(scalars)] else ",".join(scalars)


def _update_kernel(
    prefix: str, dtype: str, arrays: tuple, outputs: tuple, prep: list, body: list, lr_dtype: str
) -> KernelSource:
    """An optimizer step's kernel: `arrays` (inputs of `dtype`), then the 0-d device scalar
    tf_lr of `lr_dtype` (read once per thread in `prep`, never on the host); `outputs` of `dtype`."""
    operation, loop_prep = "\n".join(body), "\n".join(prep)
    inputs = (*((dtype, name, False) for name in arrays), (lr_dtype, "tf_lr", True))
    outs = tuple((dtype, name, False) for name in outputs)
    name = _name(prefix, _typed((lr_dtype,)) + loop_prep + operation)
    return KernelSource(name, inputs, outs, operation, "", loop_prep)


def sgd_momentum_update(dtype: str, momentum: float, nesterov: bool, lr_dtype: str = "float64") -> KernelSource:
    """The step of `tapeflow.ops.optim.sgd_momentum_update` for parameters of `dtype`: inputs
    tf_param, tf_m, tf_grad and tf_lr; outputs tf_param_out, tf_m_out. As the reference, all in
    `dtype`, the learning rate and momentum rounded to it."""
    t, mu = CTYPES[dtype], literal(momentum, dtype)
    body = [f"const {t} tf_m_new = tf_m * {mu} - tf_grad * tf_lr_t;"]
    if nesterov:
        body.append(f"tf_param_out = tf_param + (tf_m_new * {mu} - tf_grad * tf_lr_t);")
    else:
        body.append("tf_param_out = tf_param + tf_m_new;")
    body.append("tf_m_out = tf_m_new;")
    prep = [f"const {t} tf_lr_t = ({t})tf_lr[0];"]
    return _update_kernel(
        "tapeflow_sgd", dtype, ("tf_param", "tf_m", "tf_grad"), ("tf_param_out", "tf_m_out"), prep, body, lr_dtype
    )


def rmsprop_update(
    dtype: str, rho: float, momentum: float, epsilon: float, centered: bool, lr_dtype: str = "float64"
) -> KernelSource:
    """The step of `tapeflow.ops.optim.rmsprop_update` for parameters of `dtype`: inputs tf_param,
    tf_velocity, tf_grad, then tf_moment (momentum > 0) and tf_average (centered), and tf_lr;
    outputs tf_param_out, tf_velocity_out, then tf_moment_out and tf_average_out likewise. As the
    reference, all in `dtype`, epsilon inside the square root."""
    t, f = CTYPES[dtype], _math(dtype)
    c = functools.partial(literal, dtype=dtype)
    slots = ["tf_moment"] * (momentum > 0) + ["tf_average"] * bool(centered)
    body = [f"const {t} tf_v_new = tf_velocity * {c(rho)} + tf_grad * tf_grad * {c(1.0 - rho)};"]
    if centered:
        body += [
            f"const {t} tf_a_new = tf_average * {c(rho)} + tf_grad * {c(1.0 - rho)};",
            f"const {t} tf_denominator = tf_v_new - tf_a_new * tf_a_new + {c(epsilon)};",
        ]
    else:
        body.append(f"const {t} tf_denominator = tf_v_new + {c(epsilon)};")
    body.append(f"{t} tf_increment = tf_grad * tf_lr_t / {f['sqrt']}(tf_denominator);")
    if momentum > 0:
        body += [f"tf_increment = tf_moment * {c(momentum)} + tf_increment;", "tf_moment_out = tf_increment;"]
    if centered:
        body.append("tf_average_out = tf_a_new;")
    body += ["tf_param_out = tf_param - tf_increment;", "tf_velocity_out = tf_v_new;"]
    prep = [f"const {t} tf_lr_t = ({t})tf_lr[0];"]
    arrays = ("tf_param", "tf_velocity", "tf_grad", *slots)
    outputs = ("tf_param_out", "tf_velocity_out", *(f"{s}_out" for s in slots))
    return _update_kernel("tapeflow_rmsprop", dtype, arrays, outputs, prep, body, lr_dtype)


def adagrad_update(dtype: str, epsilon: float, lr_dtype: str = "float64") -> KernelSource:
    """The step of `tapeflow.ops.optim.adagrad_update` for parameters of `dtype`: inputs tf_param,
    tf_accumulator, tf_grad and tf_lr; outputs tf_param_out, tf_accumulator_out. As the
    reference, all in `dtype`, epsilon inside the square root."""
    t, f = CTYPES[dtype], _math(dtype)
    body = [
        f"const {t} tf_a_new = tf_accumulator + tf_grad * tf_grad;",
        f"tf_param_out = tf_param - tf_grad * tf_lr_t / {f['sqrt']}(tf_a_new + {literal(epsilon, dtype)});",
        "tf_accumulator_out = tf_a_new;",
    ]
    prep = [f"const {t} tf_lr_t = ({t})tf_lr[0];"]
    arrays, outputs = ("tf_param", "tf_accumulator", "tf_grad"), ("tf_param_out", "tf_accumulator_out")
    return _update_kernel("tapeflow_adagrad", dtype, arrays, outputs, prep, body, lr_dtype)


def adamw_update(
    dtype: str,
    weight_decay: float,
    beta1: float,
    beta2: float,
    epsilon: float,
    epsilon_on_sqrt_v: bool,
    rate_dtype: str = "float64",
    lr_dtype: str = "float64",
    step_dtype: str = "float64",
) -> KernelSource:
    """The step of `tapeflow.ops.optim.adamw_update`: the parameter first decays by
    lr * weight_decay (computed in `rate_dtype`, the float type the learning rate had before it
    became the float64 tf_lr, then rounded to `dtype`), then `adam_update`'s kernel body runs on
    the decayed parameter; inputs and outputs as that kernel's (tf_lr of `lr_dtype`, tf_step of
    `step_dtype`)."""
    t, r = CTYPES[dtype], CTYPES[rate_dtype]
    scalars = (lr_dtype, step_dtype)
    adam = adam_update(dtype, beta1, beta2, epsilon, epsilon_on_sqrt_v, scalars)
    decay = f"({r})tf_lr[0] * {literal(weight_decay, rate_dtype)}"
    prep = f"{adam.loop_prep}\nconst {t} tf_decay = ({t})({decay});"
    decayed = f"const {t} tf_decayed = tf_param - tf_param * tf_decay;"
    operation = decayed + "\n" + re.sub(r"\btf_param\b", "tf_decayed", adam.operation)
    name = _name("tapeflow_adamw", _typed(scalars) + prep + operation)
    return dataclasses.replace(adam, name=name, operation=operation, loop_prep=prep)
