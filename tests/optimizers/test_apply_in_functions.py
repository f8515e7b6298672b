"""`apply_gradients` inside a `tp.function`: every run of the frozen function takes the next
step, as eager calls do (the step number is read from a counter the graph advances)."""

from __future__ import annotations

import numpy as np
import pytest

import tapeflow as tp


def _trainer(optimizer, frozen: bool):
    w = tp.Variable(np.array([1.0, -2.0, 0.5], np.float32))

    def step():
        with tp.GradientTape() as tape:
            loss = tp.sum(w * w * w)
        optimizer.apply_gradients([(tape.gradient(loss, w), w)])
        return loss

    return w, (tp.function(step) if frozen else step)


@pytest.mark.parametrize(
    "make",
    [
        lambda: tp.optimizers.Adam(0.1),
        lambda: tp.optimizers.AdamW(0.05),
        lambda: tp.optimizers.RMSprop(0.01, centered=True),
    ],
)
def test_frozen_steps_match_eager_steps(make):
    eager_opt, frozen_opt = make(), make()
    eager_w, eager_step = _trainer(eager_opt, frozen=False)
    frozen_w, frozen_step = _trainer(frozen_opt, frozen=True)
    for n in range(1, 5):
        eager_step()
        frozen_step()
        assert frozen_opt.iterations == eager_opt.iterations == n
        np.testing.assert_allclose(frozen_w.numpy(), eager_w.numpy(), rtol=1e-6, atol=1e-7)
    assert len(frozen_step.graphs) == 1  # one trace served every step


def test_a_count_set_from_outside_is_the_one_the_graph_reads():
    eager_opt, frozen_opt = tp.optimizers.Adam(0.1), tp.optimizers.Adam(0.1)
    eager_w, eager_step = _trainer(eager_opt, frozen=False)
    frozen_w, frozen_step = _trainer(frozen_opt, frozen=True)
    eager_step()
    frozen_step()
    eager_opt.iterations = frozen_opt.iterations = 40  # as restoring a checkpoint does
    eager_step()
    frozen_step()
    assert frozen_opt.iterations == 41
    np.testing.assert_allclose(frozen_w.numpy(), eager_w.numpy(), rtol=1e-6, atol=1e-7)
    assert int(frozen_opt.get_state()["iterations"]) == 41


def test_a_python_schedule_is_held_at_its_rate_with_a_warning():
    schedule = tp.optimizers.schedules.ExponentialDecay(0.1, 1, 0.5)
    optimizer = tp.optimizers.SGD(schedule)
    w, step = _trainer(optimizer, frozen=True)
    with pytest.warns(UserWarning, match="ExponentialDecay computes in Python"):
        step()
    before = w.numpy().copy()
    step()
    gradient = 3.0 * before * before
    np.testing.assert_allclose(w.numpy(), before - 0.1 * gradient, rtol=1e-6)  # still the step-1 rate
    assert optimizer.iterations == 2
