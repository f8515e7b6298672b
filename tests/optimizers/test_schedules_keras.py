"""The learning-rate schedules against Keras's at many steps, and their configs."""

import os

os.environ.setdefault("KERAS_BACKEND", "torch")

import keras  # noqa: E402
import numpy as np  # noqa: E402
import pytest  # noqa: E402

import tapeflow as tp  # noqa: E402

CASES = [
    ("PolynomialDecay", {"initial_learning_rate": 0.1, "decay_steps": 10}),
    ("PolynomialDecay", {"initial_learning_rate": 0.1, "decay_steps": 7, "end_learning_rate": 0.01, "power": 0.5}),
    ("PolynomialDecay", {"initial_learning_rate": 0.1, "decay_steps": 6, "power": 2.0, "cycle": True}),
    ("InverseTimeDecay", {"initial_learning_rate": 0.1, "decay_steps": 3, "decay_rate": 0.5}),
    ("InverseTimeDecay", {"initial_learning_rate": 0.1, "decay_steps": 3, "decay_rate": 0.5, "staircase": True}),
    ("CosineDecayRestarts", {"initial_learning_rate": 0.1, "first_decay_steps": 5}),
    ("CosineDecayRestarts", {"initial_learning_rate": 0.1, "first_decay_steps": 4, "t_mul": 1.0, "m_mul": 0.8}),
    (
        "CosineDecayRestarts",
        {"initial_learning_rate": 0.2, "first_decay_steps": 3, "t_mul": 1.5, "m_mul": 0.5, "alpha": 0.1},
    ),
]
IDS = [f"{name}-{i}" for i, (name, _) in enumerate(CASES)]


@pytest.mark.parametrize(("name", "cfg"), CASES, ids=IDS)
def test_values_match_keras(name, cfg):
    ours = getattr(tp.optimizers.schedules, name)(**cfg)
    theirs = getattr(keras.optimizers.schedules, name)(**cfg)
    for step in [0, 1, 2, 3, 5, 6, 7, 10, 13, 20, 31, 50]:
        want = float(keras.ops.convert_to_numpy(theirs(step)))
        assert ours(step) == pytest.approx(want, rel=1e-5, abs=1e-7), step


@pytest.mark.parametrize(("name", "cfg"), CASES, ids=IDS)
def test_config_round_trip(name, cfg):
    ours = getattr(tp.optimizers.schedules, name)(**cfg)
    theirs = getattr(keras.optimizers.schedules, name)(**cfg)
    assert ours.get_config() == pytest.approx(theirs.get_config())
    again = tp.optimizers.schedules.deserialize(tp.optimizers.schedules.serialize(ours))
    assert type(again) is type(ours) and again.get_config() == ours.get_config()
    np.testing.assert_allclose(again(9), ours(9))


def test_bad_arguments():
    with pytest.raises(ValueError, match="decay_steps"):
        tp.optimizers.schedules.PolynomialDecay(0.1, 0)
    with pytest.raises(ValueError, match="first_decay_steps"):
        tp.optimizers.schedules.CosineDecayRestarts(0.1, -1)
