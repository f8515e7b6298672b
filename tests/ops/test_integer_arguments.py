"""Integer arguments from users on their way to a shape, index, count or stride (of ops and
layers): a value of
2**31 or more, a negative one where that is wrong, a float, a bool or a uint64 beyond int64
is refused with a ValueError or TypeError naming the op, before anything is allocated. A few
hundred probes run in a child process with its memory capped, so that a probe that slipped
through could not take the machine's memory."""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap

import numpy as np
import pytest

_PROBE = textwrap.dedent(
    """
    import json, resource
    import numpy as np
    resource.setrlimit(resource.RLIMIT_AS, (6 << 30, 6 << 30))
    import tapeflow as tp

    x, img = tp.ones((2, 3)), tp.ones((1, 4, 4, 2))
    ARGUMENTS = {  # op name the error must give -> call with one integer argument
        "zeros": lambda v: tp.zeros((2, v)),
        "ones": lambda v: tp.ones(v),
        "full": lambda v: tp.full((v, 1), 1.0),
        "eye": lambda v: tp.eye(v),
        "linspace": lambda v: tp.linspace(0.0, 1.0, v),
        "reshape": lambda v: tp.reshape(x, (v, -1)),
        "broadcast_to": lambda v: tp.broadcast_to(x, (v, 2, 3)),
        "tile": lambda v: tp.tile(x, (1, v)),
        "pad": lambda v: tp.pad(x, ((0, v), (0, 0))),
        "split": lambda v: tp.split(x, [v, 1], axis=1),
        "one_hot": lambda v: tp.one_hot(tp.tensor([1]), v),
        "gather": lambda v: tp.gather(x, [v], axis=1),
        "random_normal": lambda v: tp.random.normal((v,)),
        "random_uniform": lambda v: tp.random.uniform((1, v)),
        "categorical": lambda v: tp.random.categorical(x, v),
        "conv2d": lambda v: tp.nn.conv2d(img, tp.ones((2, 2, 2, 1)), v, "SAME"),
        "max_pool2d": lambda v: tp.nn.max_pool2d(img, v, 1, "VALID"),
        "avg_pool2d": lambda v: tp.nn.avg_pool2d(img, 2, (1, v), "SAME"),
        "set_num_threads": lambda v: tp.set_num_threads(v),
        "TensorSpec": lambda v: tp.TensorSpec((v, 3)),
        "sum": lambda v: tp.sum(x, axis=v),
        "argmax": lambda v: tp.argmax(x, axis=v),
        "transpose": lambda v: tp.transpose(x, (v, 0)),
        "concat": lambda v: tp.concat([x, x], axis=v),
        "expand_dims": lambda v: tp.expand_dims(x, v),
        "embedding_lookup": lambda v: tp.nn.embedding_lookup(x, [v]),
        "getitem": lambda v: x[0, v],
        "Dense": lambda v: tp.layers.Dense(v),
        "Conv2D": lambda v: tp.layers.Conv2D(2, (v, 2)),
        "Embedding": lambda v: tp.layers.Embedding(v, 2),
        "LSTM": lambda v: tp.layers.LSTM(v),
        "MaxPooling2D": lambda v: tp.layers.MaxPooling2D(v),
        "Reshape": lambda v: tp.layers.Reshape((v, -1)),
        "Input": lambda v: tp.Input((v, 3)),
    }
    VALUES = [2**31, 2**32 + 1, 2**63 - 1, 2**63, 2**64 - 1, 2**100, -2**31 - 1, -2**63, np.int64(2**40),
              np.uint64(2**64 - 1), 2.5, 3.0, np.float64(2.0), True, "3", -5]
    NAMED = {  # an error of the op it is built on, or in the layer's own name
        "embedding_lookup": ("embedding_lookup", "gather"),
        "Dense": ("dense",),
        "Conv2D": ("conv2d",),
        "Embedding": ("embedding",),
        "LSTM": ("lstm",),
        "MaxPooling2D": ("max_pooling2d",),
        "Reshape": ("reshape",),
    }
    outcome = {"refused": 0, "accepted": [], "leaked": []}
    for op, call in ARGUMENTS.items():
        for v in VALUES:
            try:
                call(v)
            except (ValueError, TypeError) as exc:
                if any(name in str(exc) for name in NAMED.get(op, (op,))):
                    outcome["refused"] += 1
                else:
                    outcome["leaked"].append(f"{op}({v!r}): {type(exc).__name__}: {str(exc)[:120]}")
            except Exception as exc:
                outcome["leaked"].append(f"{op}({v!r}): {type(exc).__name__}: {str(exc)[:120]}")
            else:
                if not (op == "getitem" and v is True):  # x[0, True] is NumPy's boolean indexing
                    outcome["accepted"].append(f"{op}({v!r})")
    print(json.dumps(outcome))
    """
)


def test_integer_arguments_out_of_range_are_refused_naming_the_op():
    out = subprocess.run([sys.executable, "-c", _PROBE], capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr[-3000:]
    outcome = json.loads(out.stdout.strip().splitlines()[-1])
    assert outcome["leaked"] == [] and outcome["accepted"] == [], outcome
    assert outcome["refused"] >= 500


def test_arange_refuses_more_values_than_a_dimension_holds():
    import tapeflow as tp

    for stop in (2**31, 2**63, np.uint64(2**64 - 1), float("inf")):
        with pytest.raises(ValueError, match="arange: .* more than 2147483647"):
            tp.arange(stop)
    assert tp.arange(2.5).numpy().tolist() == [0.0, 1.0, 2.0]
    assert tp.arange(-5).shape == (0,)
