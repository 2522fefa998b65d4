"""docs/policy_strip.py: the frames of a trained actor-critic's greedy episode on Pendulum,
the return it reports being that of the same episode played through the Python API, and a
world without rgb_array frames refused in one line."""

from __future__ import annotations

import importlib.util
from pathlib import Path

import numpy as np
import pytest

import rs_lightning

ROOT = Path(__file__).resolve().parents[1]
_spec = importlib.util.spec_from_file_location("policy_strip", ROOT / "docs" / "policy_strip.py")
policy_strip = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(policy_strip)


def train_quick(folder: Path, overrides: list[str]) -> Path:
    from hydra import compose, initialize_config_dir

    from rs_lightning.app.train import run
    from tests.conftest import CONF

    with initialize_config_dir(config_dir=str(CONF), version_base="1.3"):
        cfg = compose("train", [*overrides, "debug=quick", "logger=none",
                                "callbacks.progress_bar=false", "trainer.max_steps=10",
                                "evaluation.every_n_steps=0", "evaluation.episodes=2"])
    run(cfg, run_dir=folder)
    return folder


def test_strip_of_a_pendulum_episode(tmp_path, capsys):
    run_dir = train_quick(tmp_path / "run", ["env=pendulum", "agent=dsac",
                                             "agent.hidden_sizes=[16]"])
    out = tmp_path / "strip.png"
    capsys.readouterr()
    assert policy_strip.main([str(run_dir), "--every", "50", "--frames", "4", "--seed", "3",
                              "--out", str(out)]) == 0
    assert out.read_bytes()[:4] == b"\x89PNG" and out.stat().st_size > 5_000
    reported = float(capsys.readouterr().out.strip().rsplit("return ", 1)[1])

    # The same episode through the API, without rendering: the same return.
    from rs_lightning.envs.factory import make_env

    agent = rs_lightning.load_agent(run_dir)
    env = make_env(agent.config.train.env)
    observation, _ = env.reset(seed=3)
    total, done, steps = 0.0, False, 0
    while not done:
        observation, reward, terminated, truncated, _ = env.step(agent.act(observation[None])[0])
        total, done, steps = total + reward, terminated or truncated, steps + 1
    assert steps == 200 and reported == pytest.approx(total, abs=0.05)

    shots, whole = policy_strip.play(agent, 3, 50, 4)
    assert [step for step, _, _ in shots] == [0, 50, 100, 150]
    assert whole == pytest.approx(total) and shots[0][1] == 0.0
    assert all(frame.ndim == 3 and frame.shape[2] == 3 for _, _, frame in shots)
    assert not np.array_equal(shots[0][2], shots[-1][2])  # the pendulum moved


def test_a_world_without_frames_is_refused_in_one_line(tmp_path, capsys):
    run_dir = train_quick(tmp_path / "run", ["env=two_stage"])
    capsys.readouterr()
    assert policy_strip.main([str(run_dir), "--out", str(tmp_path / "x.png")]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "draws no rgb_array frames" in err[0]
    assert not (tmp_path / "x.png").exists()


def test_the_title_names_the_setting_whatever_its_parameters():
    """A spectral measure's parameters are tuples: the title joins their values (formatting
    them as one number raised TypeError)."""
    from rs_lightning.risk import Utility

    assert policy_strip.setting_label(Utility(1.0, "cvar", {"rho": 0.1})) == "alpha 1"
    assert policy_strip.setting_label(Utility(0.3, "cvar", {"rho": 0.1})) == "alpha 0.3, cvar rho 0.1"
    assert policy_strip.setting_label(Utility(0.5, "spectral", {
        "levels": (0.1, 0.3), "weights": (0.5, 0.5)})) == (
        "alpha 0.5, spectral levels 0.1/0.3 weights 0.5/0.5")
