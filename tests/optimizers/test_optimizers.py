"""Optimizers and learning-rate schedules against torch.optim and NumPy float64.

Where Keras and torch agree (SGD with momentum, and every optimizer once epsilon
is 0) the reference is torch.optim. They differ in where epsilon goes: Keras
adds it to sqrt(v) *before* Adam's bias correction, and *inside* the square root
for RMSprop and Adagrad, while torch adds it outside, after correction. With
epsilon != 0 the reference is therefore a NumPy float64 reimplementation of the
Keras formulas (keras_reference below).
"""

import math

import numpy as np
import pytest
import torch

import tapeflow as tp
from tapeflow.optimizers import schedules

STEPS = 5
SHAPES = [(3, 4), (5,)]


def _grads(seed: int, steps: int = STEPS, shapes=SHAPES) -> list[list[np.ndarray]]:
    rng = np.random.default_rng(seed)
    return [[rng.normal(size=s) for s in shapes] for _ in range(steps)]


def _init(seed: int = 0, shapes=SHAPES) -> list[np.ndarray]:
    rng = np.random.default_rng(seed)
    return [rng.normal(size=s) for s in shapes]


def _variables(init, dtype="float64") -> list[tp.Variable]:
    return [tp.Variable(a.astype(dtype), name=f"w{i}") for i, a in enumerate(init)]


def run_ours(opt, init, grads, dtype="float64") -> list[np.ndarray]:
    variables = _variables(init, dtype)
    for step in grads:
        opt.apply_gradients(zip([tp.tensor(g.astype(dtype)) for g in step], variables, strict=True))
    return [v.numpy().astype(np.float64) for v in variables]


def run_torch(make, init, grads) -> list[np.ndarray]:
    params = [torch.tensor(a.copy(), requires_grad=True) for a in init]
    opt = make(params)
    for step in grads:
        for p, g in zip(params, step, strict=True):
            p.grad = torch.tensor(g)
        opt.step()
    return [p.detach().numpy() for p in params]


def keras_reference(kind: str, cfg: dict, init, grads) -> list[np.ndarray]:
    """The Keras 3 update rules, written out in NumPy float64."""
    params = [a.copy() for a in init]
    slots = [{} for _ in params]
    lr = cfg.get("learning_rate", 0.001)
    for t, step in enumerate(grads, start=1):
        for i, g in enumerate(step):
            p, s = params[i], slots[i]
            wd = cfg.get("weight_decay")
            if wd:
                p = p - p * wd * lr
            if kind == "adam":
                b1, b2, eps = cfg.get("beta_1", 0.9), cfg.get("beta_2", 0.999), cfg["epsilon"]
                m = s.get("m", 0.0) + (g - s.get("m", 0.0)) * (1 - b1)
                v = s.get("v", 0.0) + (g * g - s.get("v", 0.0)) * (1 - b2)
                s["m"], s["v"] = m, v
                if cfg.get("amsgrad"):
                    v = s["vhat"] = np.maximum(s.get("vhat", 0.0), v)
                alpha = lr * math.sqrt(1 - b2**t) / (1 - b1**t)
                p = p - m * alpha / (np.sqrt(v) + eps)
            elif kind == "rmsprop":
                rho, eps, mom = cfg.get("rho", 0.9), cfg["epsilon"], cfg.get("momentum", 0.0)
                v = s["v"] = rho * s.get("v", 0.0) + (1 - rho) * g * g
                if cfg.get("centered"):
                    a = s["a"] = rho * s.get("a", 0.0) + (1 - rho) * g
                    denominator = v - a * a + eps
                else:
                    denominator = v + eps
                increment = lr * g / np.sqrt(denominator)
                if mom:
                    increment = s["mom"] = mom * s.get("mom", 0.0) + increment
                p = p - increment
            elif kind == "adagrad":
                acc = s["acc"] = s.get("acc", cfg.get("initial_accumulator_value", 0.1)) + g * g
                p = p - lr * g / np.sqrt(acc + cfg["epsilon"])
            params[i] = p
    return params


def assert_close(ours, ref, rtol=1e-5, atol=1e-8):
    for a, b in zip(ours, ref, strict=True):
        np.testing.assert_allclose(a, b, rtol=rtol, atol=atol)


# ------------------------------------------------------------ against torch
TORCH_CASES = {
    "sgd": (lambda: tp.optimizers.SGD(0.1), lambda p: torch.optim.SGD(p, lr=0.1)),
    "sgd-momentum": (
        lambda: tp.optimizers.SGD(0.1, momentum=0.9),
        lambda p: torch.optim.SGD(p, lr=0.1, momentum=0.9),
    ),
    "sgd-nesterov": (
        lambda: tp.optimizers.SGD(0.05, momentum=0.8, nesterov=True),
        lambda p: torch.optim.SGD(p, lr=0.05, momentum=0.8, nesterov=True),
    ),
    "adam": (
        lambda: tp.optimizers.Adam(0.01, beta_1=0.8, beta_2=0.99, epsilon=0.0),
        lambda p: torch.optim.Adam(p, lr=0.01, betas=(0.8, 0.99), eps=0.0),
    ),
    "adam-amsgrad": (
        lambda: tp.optimizers.Adam(0.01, epsilon=0.0, amsgrad=True),
        lambda p: torch.optim.Adam(p, lr=0.01, eps=0.0, amsgrad=True),
    ),
    "adamw": (
        lambda: tp.optimizers.AdamW(0.01, weight_decay=0.1, epsilon=0.0),
        lambda p: torch.optim.AdamW(p, lr=0.01, weight_decay=0.1, eps=0.0),
    ),
    "rmsprop": (
        lambda: tp.optimizers.RMSprop(0.01, epsilon=0.0),
        lambda p: torch.optim.RMSprop(p, lr=0.01, alpha=0.9, eps=0.0),
    ),
    "rmsprop-centered-momentum": (
        lambda: tp.optimizers.RMSprop(0.01, rho=0.8, momentum=0.5, centered=True, epsilon=0.0),
        lambda p: torch.optim.RMSprop(p, lr=0.01, alpha=0.8, momentum=0.5, centered=True, eps=0.0),
    ),
    "adagrad": (
        lambda: tp.optimizers.Adagrad(0.1, initial_accumulator_value=0.1, epsilon=0.0),
        lambda p: torch.optim.Adagrad(p, lr=0.1, initial_accumulator_value=0.1, eps=0.0),
    ),
}


@pytest.mark.parametrize("case", sorted(TORCH_CASES))
def test_matches_torch_optim(case):
    ours, theirs = TORCH_CASES[case]
    init, grads = _init(), _grads(1)
    assert_close(run_ours(ours(), init, grads), run_torch(theirs, init, grads))


KERAS_CASES = [
    ("adam", {"learning_rate": 0.01, "epsilon": 1e-7}),
    ("adam", {"learning_rate": 0.01, "epsilon": 0.1}),
    ("adam", {"learning_rate": 0.01, "epsilon": 0.1, "amsgrad": True}),
    ("adam", {"learning_rate": 0.01, "epsilon": 0.1, "weight_decay": 0.2}),
    ("rmsprop", {"learning_rate": 0.01, "epsilon": 1e-7}),
    ("rmsprop", {"learning_rate": 0.01, "epsilon": 0.5, "momentum": 0.3, "centered": True}),
    ("adagrad", {"learning_rate": 0.1, "epsilon": 1e-7}),
    ("adagrad", {"learning_rate": 0.1, "epsilon": 0.5, "initial_accumulator_value": 0.0}),
]


@pytest.mark.parametrize(("kind", "cfg"), KERAS_CASES)
def test_matches_keras_formula_with_epsilon(kind, cfg):
    cls = {"adam": tp.optimizers.Adam, "rmsprop": tp.optimizers.RMSprop, "adagrad": tp.optimizers.Adagrad}[kind]
    init, grads = _init(), _grads(2)
    assert_close(run_ours(cls(**cfg), init, grads), keras_reference(kind, cfg, init, grads))


def test_keras_epsilon_differs_from_torch_epsilon():
    """The reason for keras_reference: with a large epsilon the two placements disagree."""
    init, grads = _init(), _grads(3)
    ours = run_ours(tp.optimizers.Adam(0.01, epsilon=0.1), init, grads)
    theirs = run_torch(lambda p: torch.optim.Adam(p, lr=0.01, eps=0.1), init, grads)
    assert not np.allclose(ours[0], theirs[0], rtol=1e-5)


@pytest.mark.parametrize(("kind", "cfg"), [KERAS_CASES[0], KERAS_CASES[2], KERAS_CASES[5], KERAS_CASES[6]])
def test_float32_variables(kind, cfg):
    cls = {"adam": tp.optimizers.Adam, "rmsprop": tp.optimizers.RMSprop, "adagrad": tp.optimizers.Adagrad}[kind]
    init, grads = _init(), _grads(4)
    ours = run_ours(cls(**cfg), init, grads, dtype="float32")
    assert_close(ours, keras_reference(kind, cfg, init, grads), rtol=1e-5, atol=1e-6)


def test_training_loop_with_tape_matches_torch():
    rng = np.random.default_rng(5)
    x, y = rng.normal(size=(16, 3)), rng.normal(size=(16, 2))
    w0, b0 = rng.normal(size=(3, 2)), np.zeros(2)
    w, b = tp.Variable(w0, name="kernel"), tp.Variable(b0, name="bias")
    opt = tp.optimizers.Adam(0.05, epsilon=0.0)
    tw, tb = torch.tensor(w0, requires_grad=True), torch.tensor(b0, requires_grad=True)
    topt = torch.optim.Adam([tw, tb], lr=0.05, eps=0.0)
    for _ in range(STEPS):
        with tp.GradientTape() as tape:
            loss = tp.mean(tp.square(tp.tensor(x) @ w + b - tp.tensor(y)))
        opt.apply_gradients(zip(tape.gradient(loss, [w, b]), [w, b], strict=True))
        topt.zero_grad()
        ((torch.tensor(x) @ tw + tb - torch.tensor(y)) ** 2).mean().backward()
        topt.step()
    assert_close([w.numpy(), b.numpy()], [tw.detach().numpy(), tb.detach().numpy()])


def test_minimize_matches_keras_docstring_value():
    x = tp.Variable(10.0)
    tp.optimizers.RMSprop(learning_rate=0.1).minimize(lambda: (x**2) / 2.0, [x])
    assert float(x) == pytest.approx(9.683772, rel=1e-6)


def test_minimize_with_tensor_needs_tape():
    x = tp.Variable(1.0)
    opt = tp.optimizers.SGD(0.5)
    with tp.GradientTape() as tape:
        loss = x * x
    opt.minimize(loss, lambda: [x], tape=tape)
    assert float(x) == pytest.approx(0.0)
    with pytest.raises(ValueError, match="tape"):
        opt.minimize(x * x, [x])


# ---------------------------------------------------------------- clipping
def _one_step(opt, grads):
    variables = [tp.Variable(np.zeros(g.shape), name=f"v{i}") for i, g in enumerate(grads)]
    opt.apply_gradients(zip([tp.tensor(g) for g in grads], variables, strict=True))
    return [-v.numpy() for v in variables]  # with SGD(1.0), the negated update is the clipped gradient


@pytest.mark.parametrize("scale", [0.1, 10.0])
def test_clipnorm_clips_each_gradient(scale):
    grads = [g * scale for g in _grads(6, steps=1)[0]]
    clipped = _one_step(tp.optimizers.SGD(1.0, clipnorm=1.0), grads)
    for g, c in zip(grads, clipped, strict=True):
        np.testing.assert_allclose(c, g / max(np.linalg.norm(g), 1.0), rtol=1e-12)


@pytest.mark.parametrize("scale", [0.1, 10.0])
def test_global_clipnorm_matches_torch(scale):
    grads = [g * scale for g in _grads(7, steps=1)[0]]
    clipped = _one_step(tp.optimizers.SGD(1.0, global_clipnorm=2.0), grads)
    params = [torch.zeros(g.shape, dtype=torch.float64, requires_grad=True) for g in grads]
    for p, g in zip(params, grads, strict=True):
        p.grad = torch.tensor(g)
    torch.nn.utils.clip_grad_norm_(params, 2.0)  # torch divides by norm + 1e-6
    assert_close(clipped, [p.grad.numpy() for p in params], rtol=1e-5)


def test_clipvalue_matches_torch():
    grads = _grads(8, steps=1)[0]
    clipped = _one_step(tp.optimizers.SGD(1.0, clipvalue=0.5), grads)
    assert_close(clipped, [np.clip(g, -0.5, 0.5) for g in grads], rtol=0)
    params = [torch.zeros(g.shape, dtype=torch.float64, requires_grad=True) for g in grads]
    for p, g in zip(params, grads, strict=True):
        p.grad = torch.tensor(g)
    torch.nn.utils.clip_grad_value_(params, 0.5)
    assert_close(clipped, [p.grad.numpy() for p in params], rtol=0)


def test_only_one_clipping_argument():
    with pytest.raises(ValueError, match="only one of clipnorm"):
        tp.optimizers.Adam(clipnorm=1.0, clipvalue=1.0)
    with pytest.raises(ValueError, match="clipnorm must be > 0"):
        tp.optimizers.SGD(clipnorm=0.0)


# ------------------------------------------------------------ weight decay
def test_weight_decay_on_any_optimizer_and_exclusions():
    kernel = tp.Variable(np.full((2,), 2.0), name="dense/kernel")
    bias = tp.Variable(np.full((2,), 2.0), name="dense/bias")
    opt = tp.optimizers.SGD(0.1, weight_decay=0.5)
    opt.exclude_from_weight_decay(var_names=["bias"])
    g = tp.tensor(np.ones(2))
    opt.apply_gradients([(g, kernel), (g, bias)])
    np.testing.assert_allclose(kernel.numpy(), 2.0 - 2.0 * 0.5 * 0.1 - 0.1)
    np.testing.assert_allclose(bias.numpy(), 2.0 - 0.1)


def test_adamw_needs_weight_decay():
    assert tp.optimizers.AdamW().weight_decay == 0.004
    with pytest.raises(ValueError, match="AdamW"):
        tp.optimizers.AdamW(weight_decay=None)


# --------------------------------------------------------------- schedules
def test_exponential_decay_closed_form():
    s = schedules.ExponentialDecay(0.1, decay_steps=100, decay_rate=0.96)
    stair = schedules.ExponentialDecay(0.1, decay_steps=100, decay_rate=0.96, staircase=True)
    for step in (0, 1, 99, 100, 250, 1000):
        assert s(step) == pytest.approx(0.1 * 0.96 ** (step / 100), rel=1e-12)
        assert stair(step) == pytest.approx(0.1 * 0.96 ** (step // 100), rel=1e-12)


def test_cosine_decay_closed_form_and_torch():
    s = schedules.CosineDecay(0.5, decay_steps=20, alpha=0.1)
    for step in (0, 3, 10, 19, 20, 40):
        k = min(step, 20)
        assert s(step) == pytest.approx(0.5 * (0.9 * 0.5 * (1 + math.cos(math.pi * k / 20)) + 0.1), rel=1e-12)
    # torch's CosineAnnealingLR is the same curve from 0.5 down to eta_min = alpha * 0.5
    p = torch.zeros(1, requires_grad=True)
    topt = torch.optim.SGD([p], lr=0.5)
    sched = torch.optim.lr_scheduler.CosineAnnealingLR(topt, T_max=20, eta_min=0.05)
    for step in range(21):
        assert s(step) == pytest.approx(sched.get_last_lr()[0], rel=1e-9)
        topt.step()
        sched.step()


def test_cosine_decay_warmup():
    s = schedules.CosineDecay(0.0, decay_steps=10, warmup_target=1.0, warmup_steps=5)
    assert [s(k) for k in (0, 1, 5)] == pytest.approx([0.0, 0.2, 1.0])
    assert s(10) == pytest.approx(0.5) and s(15) == pytest.approx(0.0) and s(99) == pytest.approx(0.0)


def test_piecewise_constant_decay():
    s = schedules.PiecewiseConstantDecay([100, 110], [1.0, 0.5, 0.1])
    assert [s(k) for k in (0, 100, 101, 110, 111, 10**6)] == [1.0, 1.0, 0.5, 0.5, 0.1, 0.1]
    with pytest.raises(ValueError, match="one more value"):
        schedules.PiecewiseConstantDecay([1, 2], [1.0, 0.5])
    with pytest.raises(ValueError, match="increase"):
        schedules.PiecewiseConstantDecay([2, 1], [1.0, 0.5, 0.1])


def test_schedule_config_round_trip():
    for s in (
        schedules.ExponentialDecay(0.1, 10, 0.5, staircase=True),
        schedules.CosineDecay(0.1, 10, alpha=0.2, warmup_target=0.3, warmup_steps=2),
        schedules.PiecewiseConstantDecay([3], [0.1, 0.01]),
    ):
        again = schedules.deserialize(schedules.serialize(s))
        assert type(again) is type(s) and again.get_config() == s.get_config()
        assert [again(k) for k in range(15)] == [s(k) for k in range(15)]


def test_optimizer_uses_schedule_at_each_iteration():
    lr = schedules.PiecewiseConstantDecay([1, 2], [1.0, 0.1, 0.01])
    w = tp.Variable(np.zeros(1))
    opt = tp.optimizers.SGD(lr)
    seen = []
    for _ in range(4):
        seen.append(opt.learning_rate)
        opt.apply_gradients([(tp.tensor(np.ones(1)), w)])
    assert seen == [1.0, 1.0, 0.1, 0.01]  # the schedule sees iterations 0, 1, 2, 3
    assert w.numpy()[0] == pytest.approx(-(1.0 + 1.0 + 0.1 + 0.01))
    with pytest.raises(TypeError, match="LearningRateSchedule"):
        opt.learning_rate = 0.5


def test_learning_rate_is_settable():
    opt = tp.optimizers.Adam(0.01)
    opt.learning_rate = 0.5
    assert opt.learning_rate == 0.5
    with pytest.raises(ValueError, match="learning_rate"):
        tp.optimizers.SGD(-1.0)


# ------------------------------------------------------------------- state
STATE_CASES = {
    "sgd-momentum": lambda: tp.optimizers.SGD(0.1, momentum=0.9, nesterov=True),
    "adam": lambda: tp.optimizers.Adam(0.01),
    "adam-amsgrad": lambda: tp.optimizers.Adam(0.01, amsgrad=True),
    "adamw": lambda: tp.optimizers.AdamW(0.01, weight_decay=0.1),
    "rmsprop": lambda: tp.optimizers.RMSprop(0.01, momentum=0.5, centered=True),
    "adagrad": lambda: tp.optimizers.Adagrad(0.1),
    "schedule": lambda: tp.optimizers.SGD(schedules.ExponentialDecay(0.1, 2, 0.5), momentum=0.5),
}


@pytest.mark.parametrize("case", sorted(STATE_CASES))
def test_state_round_trip_reproduces_later_updates_exactly(case):
    make = STATE_CASES[case]
    init, grads = _init(), _grads(9, steps=6)
    first = _variables(init)
    opt = make()
    for step in grads[:3]:
        opt.apply_gradients(zip([tp.tensor(g) for g in step], first, strict=True))
    state = opt.get_state()
    assert state["iterations"] == 3
    second = [tp.Variable(v.numpy(), name=v.name) for v in first]
    restored = make()
    restored.set_state(state, var_list=second)
    for step in grads[3:]:
        opt.apply_gradients(zip([tp.tensor(g) for g in step], first, strict=True))
        restored.apply_gradients(zip([tp.tensor(g) for g in step], second, strict=True))
    for a, b in zip(first, second, strict=True):
        np.testing.assert_array_equal(a.numpy(), b.numpy())
    assert restored.get_state().keys() == opt.get_state().keys()
    for key, value in opt.get_state().items():
        np.testing.assert_array_equal(restored.get_state()[key], value)


def test_state_names_are_stable_and_unique():
    a, b = tp.Variable(np.zeros(2), name="kernel"), tp.Variable(np.zeros(3), name="kernel")
    opt = tp.optimizers.Adam()
    opt.build([a, b])
    assert list(opt.get_state()) == [
        "iterations",
        "kernel/momentum",
        "kernel/velocity",
        "kernel_1/momentum",
        "kernel_1/velocity",
    ]
    state = tp.optimizers.Adagrad(initial_accumulator_value=0.25)
    state.build([a])
    np.testing.assert_array_equal(state.get_state()["kernel/accumulator"], [0.25, 0.25])


def test_set_state_validates_and_changes_nothing_on_error():
    w = tp.Variable(np.zeros((2, 3)), name="w")
    opt = tp.optimizers.Adam(0.1)
    opt.apply_gradients([(tp.tensor(np.ones((2, 3))), w)])
    before = opt.get_state()
    bad_shape = {**before, "w/momentum": np.zeros((3, 2))}
    with pytest.raises(ValueError, match=r"'w/momentum' has shape \(3, 2\), expected \(2, 3\)"):
        opt.set_state({**bad_shape, "iterations": np.array(7)})
    missing = {k: v for k, v in before.items() if k != "w/velocity"}
    with pytest.raises(ValueError, match=r"missing \['w/velocity'\]"):
        opt.set_state(missing)
    with pytest.raises(ValueError, match=r"unexpected \['b/momentum'\]"):
        opt.set_state({**before, "b/momentum": np.zeros(1)})
    with pytest.raises(ValueError, match="iterations"):
        opt.set_state({**before, "iterations": np.array(-1)})
    assert opt.iterations == 1
    for key, value in opt.get_state().items():
        np.testing.assert_array_equal(value, before[key])
    with pytest.raises(ValueError, match="var_list"):
        tp.optimizers.Adam().set_state(before)


def test_get_state_returns_copies():
    w = tp.Variable(np.zeros(2), name="w")
    opt = tp.optimizers.SGD(0.1, momentum=0.9)
    opt.apply_gradients([(tp.tensor(np.ones(2)), w)])
    state = opt.get_state()
    state["w/momentum"][:] = 100.0
    np.testing.assert_allclose(opt.get_state()["w/momentum"], [-0.1, -0.1])


# ------------------------------------------------- immutability and inputs
@pytest.mark.parametrize("case", sorted(STATE_CASES))
def test_updates_never_write_arrays_in_place(case):
    w = tp.Variable(np.ones((3,)), name="w")
    opt = STATE_CASES[case]()
    opt.apply_gradients([(tp.tensor(np.ones(3)), w)])
    old_w = w.numpy()
    old_slots = {k: v.numpy() for k, v in opt.slots(w).items()}
    copies = [old_w.copy()] + [a.copy() for a in old_slots.values()]
    opt.apply_gradients([(tp.tensor(np.full(3, 0.5)), w)])
    assert not np.array_equal(w.numpy(), old_w)
    for kept, copy in zip([old_w, *old_slots.values()], copies, strict=True):
        np.testing.assert_array_equal(kept, copy)


def test_tape_keeps_values_read_before_an_update():
    w = tp.Variable(np.array([1.0, 2.0]), name="w")
    opt = tp.optimizers.Adam(0.5)
    with tp.GradientTape(persistent=True) as tape:
        loss = tp.sum(w * w)
    opt.apply_gradients([(tape.gradient(loss, w), w)])
    np.testing.assert_allclose(tape.gradient(loss, w).numpy(), [2.0, 4.0])


def test_none_gradients_are_skipped_with_a_warning():
    a, b = tp.Variable(np.ones(1), name="a"), tp.Variable(np.ones(1), name="b")
    opt = tp.optimizers.SGD(0.5)
    with pytest.warns(UserWarning, match=r"\['b'\]"):
        opt.apply_gradients([(tp.tensor(np.ones(1)), a), (None, b)])
    assert a.numpy()[0] == 0.5 and b.numpy()[0] == 1.0
    with pytest.raises(ValueError, match="no gradients"):
        opt.apply_gradients([(None, a)])
    opt.apply_gradients([])
    assert opt.iterations == 1


def test_bad_gradients_raise_clear_errors():
    w = tp.Variable(np.ones((2, 2)), name="kernel")
    opt = tp.optimizers.SGD()
    with pytest.raises(ValueError, match=r"shape \(3,\) for variable 'kernel' of shape \(2, 2\)"):
        opt.apply_gradients([(tp.tensor(np.ones(3)), w)])
    with pytest.raises(TypeError, match="Variable"):
        opt.apply_gradients([(tp.tensor(np.ones(2)), tp.tensor(np.ones(2)))])


def test_gradient_dtype_is_cast_to_the_variable():
    w = tp.Variable(np.ones(2, dtype=np.float32), name="w")
    tp.optimizers.SGD(0.5).apply_gradients([(np.ones(2), w)])
    assert w.dtype == tp.float32 and w.numpy().tolist() == [0.5, 0.5]


def test_bad_hyperparameters():
    with pytest.raises(ValueError, match="momentum"):
        tp.optimizers.SGD(momentum=1.5)
    with pytest.raises(ValueError, match="beta_1"):
        tp.optimizers.Adam(beta_1=1.0)
    with pytest.raises(ValueError, match="initial_accumulator_value"):
        tp.optimizers.Adagrad(initial_accumulator_value=-0.1)


# ------------------------------------------------------------------ config
@pytest.mark.parametrize("case", sorted(STATE_CASES))
def test_config_round_trip(case):
    opt = STATE_CASES[case]()
    again = type(opt).from_config(opt.get_config())
    assert again.get_config() == opt.get_config()
    assert tp.optimizers.get(tp.optimizers.serialize(opt)).get_config() == opt.get_config()


def test_keras_defaults():
    assert tp.optimizers.SGD().get_config()["learning_rate"] == 0.01
    adam = tp.optimizers.Adam().get_config()
    assert (adam["learning_rate"], adam["beta_1"], adam["beta_2"], adam["epsilon"]) == (0.001, 0.9, 0.999, 1e-7)
    rms = tp.optimizers.RMSprop().get_config()
    assert (rms["rho"], rms["momentum"], rms["epsilon"], rms["centered"]) == (0.9, 0.0, 1e-7, False)
    ada = tp.optimizers.Adagrad().get_config()
    assert (ada["initial_accumulator_value"], ada["epsilon"]) == (0.1, 1e-7)


def test_get_by_name():
    assert isinstance(tp.optimizers.get("adam"), tp.optimizers.Adam)
    assert isinstance(tp.optimizers.get("RMSprop"), tp.optimizers.RMSprop)
    assert isinstance(tp.optimizers.get("adamw"), tp.optimizers.AdamW)
    opt = tp.optimizers.SGD()
    assert tp.optimizers.get(opt) is opt
    with pytest.raises(ValueError, match=r"unknown optimizer 'adamq'.*'adagrad', 'adam', 'adamax', 'adamw'"):
        tp.optimizers.get("adamq")
    with pytest.raises(TypeError):
        tp.optimizers.get(3)
