"""Mixed precision on the CPU: policies, autocast layers, loss scaling, and training
against float32 training."""

import numpy as np
import pytest

import tapeflow as tp
from tapeflow.mixed_precision import LossScaleOptimizer, Policy

MIXED = ["mixed_float16", "mixed_bfloat16"]


@pytest.fixture(autouse=True)
def _float32_after():
    yield
    tp.mixed_precision.set_global_policy("float32")


def test_policies_name_their_dtypes():
    assert (Policy("mixed_float16").variable_dtype, Policy("mixed_float16").compute_dtype) == (tp.float32, tp.float16)
    assert Policy("mixed_bfloat16").compute_dtype is tp.bfloat16 and Policy("float64").compute_dtype is tp.float64
    with pytest.raises(ValueError, match="Policy: expected 'mixed_float16'.*got 'int32'"):
        Policy("int32")
    tp.mixed_precision.set_global_policy("mixed_bfloat16")
    assert tp.mixed_precision.global_policy() == Policy("mixed_bfloat16")


@pytest.mark.parametrize("policy", MIXED)
def test_layers_keep_float32_weights_and_compute_low(policy):
    tp.mixed_precision.set_global_policy(policy)
    low = Policy(policy).compute_dtype
    dense = tp.layers.Dense(4, activation="relu")
    x = tp.tensor(np.random.default_rng(0).standard_normal((3, 5)).astype(np.float32))
    with tp.GradientTape() as tape:
        y = dense(x)
        loss = tp.losses.MeanSquaredError()(tp.zeros((3, 4)), y)
    grads = tape.gradient(loss, dense.trainable_weights)
    assert dense.kernel.dtype is tp.float32 and y.dtype is low and loss.dtype is tp.float32
    assert [g.dtype for g in grads] == [tp.float32, tp.float32]
    expected = np.maximum(x.numpy() @ dense.kernel.numpy() + dense.bias.numpy(), 0)
    np.testing.assert_allclose(np.asarray(y.numpy(), np.float32), expected, rtol=2e-2, atol=2e-2)
    assert dense.get_config()["dtype"] == policy


def test_softmax_outputs_and_losses_are_float32():
    tp.mixed_precision.set_global_policy("mixed_float16")
    probs = tp.layers.Dense(3, activation="softmax")(tp.ones((2, 4)))
    assert probs.dtype is tp.float32
    np.testing.assert_allclose(probs.numpy().sum(axis=1), [1.0, 1.0], rtol=1e-6)
    loss = tp.losses.SparseCategoricalCrossentropy()(tp.tensor([0, 2]), tp.cast(probs, "float16"))
    assert loss.dtype is tp.float32


def test_a_layer_dtype_overrides_the_global_policy():
    tp.mixed_precision.set_global_policy("mixed_float16")
    assert tp.layers.Dense(2, dtype="float32")(tp.ones((1, 2))).dtype is tp.float32
    with pytest.raises(TypeError, match="floating point"):
        tp.layers.Dense(2, dtype="int32")


def _blobs(n=256, seed=0):
    rng = np.random.default_rng(seed)
    centers = rng.standard_normal((3, 10)) * 2.0
    y = rng.integers(0, 3, n)
    return (centers[y] + rng.standard_normal((n, 10))).astype(np.float32), y


def _train(policy: str, jit: bool, epochs: int = 6):
    tp.mixed_precision.set_global_policy(policy)
    tp.random.seed(0)
    x, y = _blobs()
    model = tp.Sequential([tp.Input((10,)), tp.layers.Dense(32, activation="relu"), tp.layers.Dense(3)])
    model.compile(
        optimizer=tp.optimizers.Adam(1e-2),
        loss=tp.losses.SparseCategoricalCrossentropy(from_logits=True),
        metrics=["accuracy"],
        jit=jit,
    )
    history = model.fit(x, y, batch_size=32, epochs=epochs, shuffle=False, verbose=0).history
    tp.mixed_precision.set_global_policy("float32")
    return history, model


@pytest.mark.parametrize("jit", [False, True], ids=["eager", "frozen"])
@pytest.mark.parametrize("policy", MIXED)
def test_mixed_training_follows_float32_training(policy, jit):
    """Loss curves within 0.05 of float32's at every epoch; final accuracy within 2 points."""
    reference, _ = _train("float32", jit)
    mixed, model = _train(policy, jit)
    assert all(w.dtype is tp.float32 for w in model.weights)
    np.testing.assert_allclose(mixed["loss"], reference["loss"], atol=0.05)
    assert abs(mixed["accuracy"][-1] - reference["accuracy"][-1]) <= 0.02
    assert reference["loss"][-1] < 0.5 * reference["loss"][0]
    if policy == "mixed_float16":
        assert isinstance(model.optimizer, LossScaleOptimizer)


def test_a_step_with_non_finite_gradients_is_skipped_and_the_scale_halves():
    w = tp.Variable([1.0, 2.0], name="w")
    opt = LossScaleOptimizer(tp.optimizers.Adam(0.1), initial_scale=64.0, dynamic_growth_steps=2)
    opt.apply_gradients([(tp.tensor([64.0, -64.0]), w)])  # gradients of a loss scaled by 64
    after_one = w.numpy().copy()
    np.testing.assert_allclose(after_one, [0.9, 2.1], rtol=1e-6)  # Adam's first step moves by lr
    slots = {k: v.numpy().copy() for k, v in opt.inner_optimizer.slots(w).items()}
    opt.apply_gradients([(tp.tensor([np.inf, 1.0]), w)])
    np.testing.assert_array_equal(w.numpy(), after_one)
    for k, v in opt.inner_optimizer.slots(w).items():
        np.testing.assert_array_equal(v.numpy(), slots[k])
    assert float(opt.scale) == 32.0
    opt.apply_gradients([(tp.tensor([1.0, 1.0]), w)])
    opt.apply_gradients([(tp.tensor([1.0, 1.0]), w)])
    assert float(opt.scale) == 64.0  # two finite steps in a row double it


def test_a_custom_loop_with_loss_scaling_equals_plain_training_eager_and_frozen():
    x, y = _blobs(64)
    results = []
    for scaled in (False, True):
        for frozen in (False, True):
            tp.random.seed(0)
            model = tp.Sequential([tp.Input((10,)), tp.layers.Dense(3)])
            inner = tp.optimizers.SGD(0.1)
            opt = LossScaleOptimizer(inner, initial_scale=1024.0) if scaled else inner
            loss_fn = tp.losses.SparseCategoricalCrossentropy(from_logits=True)

            def step(x, y, model=model, opt=opt, loss_fn=loss_fn):
                with tp.GradientTape() as tape:
                    loss = loss_fn(y, model(x))
                    target = opt.scale_loss(loss)
                grads = tape.gradient(target, model.trainable_weights)
                opt.apply_gradients(zip(grads, model.trainable_weights, strict=True))
                return loss

            run = tp.function(step) if frozen else step
            for _ in range(3):
                run(tp.tensor(x), tp.tensor(y))
            results.append(model.get_weights())
    for other in results[1:]:
        for a, b in zip(results[0], other, strict=True):
            np.testing.assert_allclose(a, b, rtol=1e-5, atol=1e-6)
