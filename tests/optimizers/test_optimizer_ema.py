"""The optimizers' moving average of the weights (use_ema), against Keras itself: steps on
the same gradients, training through fit (eager and frozen), the argument checks,
configs, state and whole-model files."""

import os

os.environ.setdefault("KERAS_BACKEND", "torch")

import keras  # noqa: E402
import numpy as np  # noqa: E402
import pytest  # noqa: E402

import tapeflow as tp  # noqa: E402

CASES = [
    ("SGD", {"learning_rate": 0.1, "use_ema": True, "ema_momentum": 0.9}),
    (
        "SGD",
        {"learning_rate": 0.1, "momentum": 0.5, "use_ema": True, "ema_momentum": 0.5, "ema_overwrite_frequency": 2},
    ),
    ("Adam", {"learning_rate": 0.05, "use_ema": True, "ema_overwrite_frequency": 3}),
    ("RMSprop", {"learning_rate": 0.01, "use_ema": True, "ema_momentum": 0.8}),
    ("Lamb", {"learning_rate": 0.05, "use_ema": True, "ema_momentum": 0.7, "ema_overwrite_frequency": 4}),
]
IDS = [f"{name}-{i}" for i, (name, _) in enumerate(CASES)]


def _steps(make_var, make_tensor, opt, inits, grads):
    variables = [make_var(x) for x in inits]
    for step in grads:
        opt.apply_gradients([(make_tensor(g), v) for g, v in zip(step, variables, strict=True)])
    return variables


@pytest.mark.parametrize(("name", "cfg"), CASES, ids=IDS)
def test_steps_and_averages_match_keras(name, cfg):
    rng = np.random.default_rng(5)
    inits = [rng.normal(size=(3, 4)).astype("float32"), rng.normal(size=(4,)).astype("float32")]
    grads = [[rng.normal(size=x.shape).astype("float32") for x in inits] for _ in range(7)]
    ours_opt = getattr(tp.optimizers, name)(**cfg)
    ours = _steps(tp.Variable, tp.tensor, ours_opt, inits, grads)
    theirs_opt = getattr(keras.optimizers, name)(**cfg)
    theirs = _steps(keras.Variable, keras.ops.convert_to_tensor, theirs_opt, inits, grads)
    for a, b, average in zip(ours, theirs, theirs_opt._model_variables_moving_average, strict=True):
        np.testing.assert_allclose(a.numpy(), keras.ops.convert_to_numpy(b), rtol=1e-5, atol=1e-6)
        np.testing.assert_allclose(
            ours_opt.slots(a)["average"].numpy(), keras.ops.convert_to_numpy(average), rtol=1e-5, atol=1e-6
        )
    ours_opt.finalize_variable_values(ours)
    theirs_opt.finalize_variable_values(theirs)
    for a, b in zip(ours, theirs, strict=True):
        np.testing.assert_allclose(a.numpy(), keras.ops.convert_to_numpy(b), rtol=1e-5, atol=1e-6)


def test_first_step_average_is_the_variable_and_overwrites_follow_the_frequency():
    w = tp.Variable([1.0])
    opt = tp.optimizers.SGD(1.0, use_ema=True, ema_momentum=0.5, ema_overwrite_frequency=2)
    opt.apply_gradients([(tp.tensor([1.0]), w)])
    assert w.numpy().tolist() == [0.0] and opt.slots(w)["average"].numpy().tolist() == [0.0]
    opt.apply_gradients([(tp.tensor([1.0]), w)])  # w = -1, average = -0.5, then overwritten
    assert w.numpy().tolist() == [-0.5] and opt.slots(w)["average"].numpy().tolist() == [-0.5]


def _models(seed=0):
    ours = tp.Sequential([tp.layers.Input((4,)), tp.layers.Dense(3, activation="tanh"), tp.layers.Dense(1)])
    theirs = keras.Sequential([keras.Input((4,)), keras.layers.Dense(3, activation="tanh"), keras.layers.Dense(1)])
    rng = np.random.default_rng(seed)
    weights = [rng.normal(size=w.shape).astype("float32") for w in theirs.get_weights()]
    ours.set_weights(weights)
    theirs.set_weights(weights)
    return ours, theirs


def _data():
    rng = np.random.default_rng(1)
    x = rng.normal(size=(32, 4)).astype("float32")
    return x, (x @ np.array([[1.0], [-2.0], [0.5], [0.3]], "float32")).astype("float32")


FIT_CASES = [
    ("SGD", {"learning_rate": 0.1, "use_ema": True, "ema_momentum": 0.9}),
    ("Adam", {"learning_rate": 0.05, "use_ema": True, "ema_overwrite_frequency": 3}),
]


@pytest.mark.parametrize("jit", [False, True], ids=["eager", "frozen"])
@pytest.mark.parametrize(("name", "cfg"), FIT_CASES, ids=[name for name, _ in FIT_CASES])
def test_fit_matches_keras(name, cfg, jit):
    """fit ends with the averages in the weights (finalize_variable_values), as Keras's."""
    ours, theirs = _models()
    x, y = _data()
    ours.compile(optimizer=getattr(tp.optimizers, name)(**cfg), loss="mse", jit_compile=jit)
    theirs.compile(optimizer=getattr(keras.optimizers, name)(**cfg), loss="mse")
    ours_history = ours.fit(x, y, batch_size=8, epochs=2, verbose=0, shuffle=False)
    theirs_history = theirs.fit(x, y, batch_size=8, epochs=2, verbose=0, shuffle=False)
    np.testing.assert_allclose(ours_history.history["loss"], theirs_history.history["loss"], rtol=1e-5)
    averages = theirs.optimizer._model_variables_moving_average
    for a, b, average in zip(ours.trainable_weights, theirs.trainable_weights, averages, strict=True):
        np.testing.assert_allclose(a.numpy(), keras.ops.convert_to_numpy(b), rtol=1e-5, atol=1e-6)
        ours_average = ours.optimizer.slots(a)["average"].numpy()
        np.testing.assert_allclose(ours_average, keras.ops.convert_to_numpy(average), rtol=1e-5, atol=1e-6)
        np.testing.assert_array_equal(ours_average, a.numpy())


def test_fit_without_ema_leaves_the_weights():
    model, _ = _models()
    x, y = _data()
    model.compile(optimizer=tp.optimizers.SGD(0.1), loss="mse")
    model.fit(x, y, epochs=1, verbose=0)
    assert not model.optimizer.use_ema and "average" not in model.optimizer.slots(model.trainable_weights[0])


@pytest.mark.parametrize(
    "cls",
    [
        tp.optimizers.SGD,
        tp.optimizers.Adam,
        tp.optimizers.AdamW,
        tp.optimizers.RMSprop,
        tp.optimizers.Adagrad,
        tp.optimizers.Adadelta,
        tp.optimizers.Adamax,
        tp.optimizers.Ftrl,
        tp.optimizers.Lamb,
        tp.optimizers.Lion,
        tp.optimizers.Nadam,
        tp.optimizers.Muon,
        tp.optimizers.ScheduleFreeAdamW,
        tp.optimizers.Adafactor,
    ],
)
def test_every_optimizer_takes_the_ema_arguments(cls):
    opt = cls(use_ema=True, ema_momentum=0.5, ema_overwrite_frequency=2)
    config = opt.get_config()
    assert (config["use_ema"], config["ema_momentum"], config["ema_overwrite_frequency"]) == (True, 0.5, 2)
    again = cls.from_config(config)
    assert (again.use_ema, again.ema_momentum, again.ema_overwrite_frequency) == (True, 0.5, 2)
    theirs = getattr(keras.optimizers, cls.__name__)().get_config()
    for key in ("use_ema", "ema_momentum", "ema_overwrite_frequency"):
        assert key in theirs and key in cls().get_config()
    w = tp.Variable(np.ones((2, 2), "float32"))
    opt.apply_gradients([(tp.ones((2, 2)), w)])
    opt.apply_gradients([(tp.ones((2, 2)), w)])
    np.testing.assert_array_equal(w.numpy(), opt.slots(w)["average"].numpy())  # overwritten on step 2


@pytest.mark.parametrize(
    ("kwargs", "match"),
    [
        ({"ema_momentum": 1.5}, "ema_momentum"),
        ({"ema_momentum": -0.1}, "ema_momentum"),
        ({"ema_overwrite_frequency": 0.5}, "ema_overwrite_frequency"),
        ({"ema_overwrite_frequency": -2}, "ema_overwrite_frequency"),
    ],
)
def test_bad_ema_arguments_raise_like_keras(kwargs, match):
    with pytest.raises(ValueError, match=match):
        tp.optimizers.SGD(use_ema=True, **kwargs)
    with pytest.raises(ValueError):
        keras.optimizers.SGD(use_ema=True, **kwargs)
    tp.optimizers.SGD(use_ema=False, **kwargs)  # only checked with use_ema, as in Keras


def test_loss_scale_optimizer_takes_ema_on_the_inner_optimizer():
    with pytest.raises(ValueError, match="use_ema"):
        tp.optimizers.LossScaleOptimizer(tp.optimizers.SGD(), use_ema=True)
    tp.optimizers.LossScaleOptimizer(tp.optimizers.SGD(), use_ema=False, ema_momentum=0.99)
    w = tp.Variable([1.0])
    opt = tp.optimizers.LossScaleOptimizer(tp.optimizers.SGD(1.0, use_ema=True, ema_momentum=0.5), initial_scale=1.0)
    opt.apply_gradients([(tp.tensor([1.0]), w)])
    opt.apply_gradients([(tp.tensor([np.inf]), w)])  # skipped: neither the weight nor the average moves
    assert w.numpy().tolist() == [0.0] and opt.inner_optimizer.slots(w)["average"].numpy().tolist() == [0.0]
    opt.apply_gradients([(tp.tensor([0.5]), w)])  # divided by the halved scale: a step of 1
    assert opt.inner_optimizer.slots(w)["average"].numpy().tolist() == [-0.5]
    opt.finalize_variable_values([w])
    assert w.numpy().tolist() == [-0.5]


def test_multi_optimizer_finalizes_each_sub_optimizer():
    a, b = tp.Variable([1.0], name="a"), tp.Variable([1.0], name="b")
    ema = tp.optimizers.SGD(1.0, use_ema=True, ema_momentum=0.5)
    opt = tp.optimizers.MultiOptimizer(tp.optimizers.OptimizerMap(tp.optimizers.SGD(1.0), {"b": ema}))
    for _ in range(2):
        opt.apply_gradients([(tp.tensor([1.0]), a), (tp.tensor([1.0]), b)])
    opt.finalize_variable_values([a, b])
    assert a.numpy().tolist() == [-1.0] and b.numpy().tolist() == [-0.5]


def test_averages_are_state_and_survive_get_set_state():
    w = tp.Variable([1.0, 2.0], name="w")
    opt = tp.optimizers.Adam(0.1, use_ema=True)
    for _ in range(3):
        opt.apply_gradients([(tp.tensor([1.0, -1.0]), w)])
    state = opt.get_state()
    assert set(state) == {"iterations", "w/momentum", "w/velocity", "w/average"}
    fresh = tp.optimizers.Adam(0.1, use_ema=True)
    fresh.set_state(state, var_list=[w])
    np.testing.assert_array_equal(fresh.slots(w)["average"].numpy(), opt.slots(w)["average"].numpy())
    assert any(v is opt.slots(w)["average"] for v in opt.variables)


@pytest.mark.parametrize("name", ["SGD", "Adam"])
def test_model_with_ema_optimizer_round_trips_through_a_file(tmp_path, name):
    model, _ = _models()
    x, y = _data()
    model.compile(optimizer=getattr(tp.optimizers, name)(0.05, use_ema=True, ema_momentum=0.7), loss="mse")
    model.fit(x, y, epochs=1, batch_size=8, verbose=0, shuffle=False)
    path = tmp_path / "model.keras"
    model.save(path)
    loaded = tp.saving.load_model(path)
    opt = loaded.optimizer
    assert (opt.use_ema, opt.ema_momentum, opt.ema_overwrite_frequency) == (True, 0.7, None)
    assert opt.iterations == model.optimizer.iterations
    for a, b in zip(model.trainable_weights, loaded.trainable_weights, strict=True):
        np.testing.assert_array_equal(a.numpy(), b.numpy())
        np.testing.assert_array_equal(model.optimizer.slots(a)["average"].numpy(), opt.slots(b)["average"].numpy())
    # training goes on from the saved averages alike
    model.fit(x, y, epochs=1, batch_size=8, verbose=0, shuffle=False)
    loaded.fit(x, y, epochs=1, batch_size=8, verbose=0, shuffle=False)
    for a, b in zip(model.trainable_weights, loaded.trainable_weights, strict=True):
        np.testing.assert_allclose(a.numpy(), b.numpy(), rtol=1e-6, atol=1e-7)
