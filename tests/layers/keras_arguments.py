"""Small valid values for the constructor arguments Keras's layers require, by argument
name, so that a test can make any layer with its defaults: `make(tp.layers.Conv3D)`."""

import inspect

import tapeflow as tp

REQUIRED = {
    "activation": "relu",
    "axes": 1,
    "dims": (2, 1),
    "equation": "ab,bc->ac",
    "factor": 0.1,
    "filters": 2,
    "head_dim": 2,
    "height": 4,
    "height_factor": 0.1,
    "input_dim": 5,
    "kernel_size": 2,
    "key_dim": 2,
    "max_number": 2,
    "n": 2,
    "num_bins": 3,
    "num_heads": 2,
    "num_key_value_heads": 1,
    "num_query_heads": 2,
    "output_dim": 3,
    "output_shape": 4,
    "output_size": 2,
    "pool_size": 2,
    "rate": 0.5,
    "scale": 0.5,
    "stddev": 0.1,
    "target_shape": (2, 2),
    "units": 3,
    "width": 4,
    "width_factor": 0.1,
    # arguments that are layers or functions
    "layer": lambda: tp.layers.Dense(2),
    "cell": lambda: tp.layers.GRUCell(2),
    "cells": lambda: [tp.layers.GRUCell(2)],
    "layers": lambda: [tp.layers.Identity()],
    "function": lambda: lambda x: x,
}


def required_arguments(cls) -> dict:
    """{name: value} for each argument of `cls.__init__` without a default."""
    out = {}
    for p in list(inspect.signature(cls.__init__).parameters.values())[1:]:
        if p.default is inspect.Parameter.empty and p.kind not in (p.VAR_POSITIONAL, p.VAR_KEYWORD):
            value = REQUIRED[p.name]
            out[p.name] = value() if callable(value) and not isinstance(value, str) else value
    return out


def make(cls, **kwargs):
    """`cls` made with small values for its required arguments (and `kwargs`)."""
    return cls(**{**required_arguments(cls), **kwargs})
