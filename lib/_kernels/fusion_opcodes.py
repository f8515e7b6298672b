"""The elementwise primitives a fused program may use: one list, from which graph
fusion, the compiled opcode table and the ONNX form of fused programs are derived.

Each name is a registered op with the same meaning; binary ops come first, and the
compiled kernel numbers its opcodes in this order.

>>> ARITY["tanh"], ARITY["maximum"]
(1, 2)
"""

from __future__ import annotations

BINARY = ("add", "subtract", "multiply", "divide", "maximum", "minimum")
UNARY = ("neg", "exp", "log", "tanh", "sigmoid", "relu", "sqrt", "square", "abs", "reciprocal", "rsqrt")
PRIMITIVES = BINARY + UNARY
ARITY = {**{name: 2 for name in BINARY}, **{name: 1 for name in UNARY}}
