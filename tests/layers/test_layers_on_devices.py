"""Every layer case of test_layers_check on every accelerator: the outputs and the gradients
(with respect to the inputs and every trainable weight) of the layer on the device equal
those of the same layer, with the same weights, on the CPU, eagerly and frozen.

"gpu:0" is the GPU backend with NumPy standing in for CuPy where there is no GPU; the XLA
test environment adds xla:0 and xla:1. A layer whose ops a backend lists as unsupported
must say so (UnsupportedOpError), never run on the CPU.
"""

import numpy as np
import pytest
from layer_check import make_inputs
from test_layers_check import CASES

import tapeflow as tp
from tapeflow.backends import UnsupportedOpError

TOL = {"gpu": 1e-5, "xla": 1e-4}


@pytest.fixture
def device(accelerator):
    return accelerator


def _as_list(value):
    return list(value) if isinstance(value, list | tuple) else [value]


def _run(layer, arrays, training, where, frozen):
    """The layer's outputs and the gradients of the sum of their squares, on `where`."""
    with tp.device(where):
        inputs = [tp.tensor(a) for a in arrays]
        floats = [t for t in inputs if t.dtype.kind == "f"]

        def forward(*tensors):
            with tp.GradientTape() as tape:
                tape.watch(list(tensors))
                outputs = _as_list(layer(list(tensors) if len(tensors) > 1 else tensors[0], training=training))
                loss = sum(tp.sum(o * o) for o in outputs)
            sources = [t for t in tensors if t.dtype.kind == "f"] + layer.trainable_weights
            return outputs, tape.gradient(loss, sources)

        tp.random.seed(3)  # the same dropout draws on both devices
        if frozen:
            results = tp.function(forward)(*inputs)
        else:
            results = forward(*inputs)
    outputs, grads = results
    assert len(floats) + len(layer.trainable_weights) == len(grads)
    return [o.numpy() for o in outputs], [None if g is None else tp.convert_to_tensor(g).numpy() for g in grads]


@pytest.mark.parametrize("frozen", [False, True], ids=["eager", "frozen"])
@pytest.mark.parametrize(("factory", "input_shape", "kwargs"), [c[1:] for c in CASES], ids=[c[0] for c in CASES])
def test_layer_on_a_device_equals_the_cpu(request, device, factory, input_shape, kwargs, frozen):
    if device.startswith("xla") and "-shear-eager" in request.node.name:
        # passes alone and in its module, differs after the whole XLA suite has run: an order effect not yet found
        request.applymarker(pytest.mark.xfail(reason="RandomShear eager on XLA after the full XLA suite", strict=False))
    training = kwargs.get("training", False)
    arrays = make_inputs(input_shape, np.random.default_rng(0), kwargs.get("int_range"))
    arrays = [a if a.dtype.kind == "i" else a.astype(np.float32) for a in _as_list(arrays)]
    on_cpu = factory(dtype="float32")
    tp.random.seed(1)
    on_cpu([tp.tensor(a) for a in arrays] if len(arrays) > 1 else tp.tensor(arrays[0]))  # builds it
    want_out, want_grads = _run(on_cpu, arrays, training, "cpu", frozen)
    try:
        with tp.device(device):
            there = factory(dtype="float32")
            there([tp.tensor(a) for a in arrays] if len(arrays) > 1 else tp.tensor(arrays[0]))
        there.set_weights(on_cpu.get_weights())
        assert all(w.device == tp.devices.parse_device(device) for w in there.weights)
        got_out, got_grads = _run(there, arrays, training, device, frozen)
    except UnsupportedOpError as err:
        pytest.skip(f"{device} cannot run an op of this layer: {err}")
    tol = TOL[device.split(":")[0]]
    for got, want in zip(got_out + got_grads, want_out + want_grads, strict=True):
        assert (got is None) == (want is None)
        if got is not None:
            np.testing.assert_allclose(got, want, rtol=tol, atol=tol)
