"""Shared fixtures: composing the project's Hydra config in-process."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
import torch

ROOT = Path(__file__).resolve().parents[1]
CONF = ROOT / "conf"

# Tests never touch the network, and small models run fastest on one thread.
os.environ.setdefault("WANDB_MODE", "offline")
os.environ.setdefault("WANDB_SILENT", "true")
torch.set_num_threads(1)


# The optional extras (pyproject.toml) that some tests need: a test whose extra is absent
# skips, naming it. The header says which ones this run had.
EXTRA_MODULES = {
    "stats": "rliable", "optuna": "hydra_plugins.hydra_optuna_sweeper", "box2d": "Box2D",
    "minatar": "minatar", "cluster": "ray", "bench": "stable_baselines3",
    "docs": "mkdocstrings_handlers.python", "mujoco": "mujoco",
}


def pytest_report_header(config):
    from importlib.util import find_spec

    def present(module: str) -> bool:
        try:
            return find_spec(module) is not None
        except ModuleNotFoundError:  # a dotted name whose parent package is absent
            return False

    have = [extra for extra, module in EXTRA_MODULES.items() if present(module)]
    missing = [extra for extra in EXTRA_MODULES if extra not in have]
    return (f"rs-lightning extras installed: {', '.join(have) or 'none'}; "
            f"absent (their tests skip): {', '.join(missing) or 'none'}")


@pytest.fixture
def compose():
    """compose(overrides) -> the composed DictConfig, as `python train.py <overrides>` sees it."""
    from hydra import compose as hydra_compose
    from hydra import initialize_config_dir

    import rs_lightning.app.run_names  # noqa: F401  (the folder names' resolvers, as train.py)

    def _compose(overrides=()):
        with initialize_config_dir(config_dir=str(CONF), version_base="1.3"):
            return hydra_compose(config_name="train", overrides=list(overrides))

    return _compose


# The files that take longest, longest first (from `--durations`: about half a minute to
# three of the default suite's time each, mostly in subprocesses of train.py). The default suite's two workers
# (pyproject.toml: -n 2 --dist loadfile --no-loadscope-reorder) take whole files in this
# order, so that no long file starts last while the other worker has nothing left to do.
LONGEST_FILES = (
    "test_train.py", "test_faults.py", "test_docs.py", "test_hparams_search.py",
    "test_bad_inputs.py", "test_gym_envs.py", "test_risk_conditioning.py",
    "test_launchers.py", "test_run_folders.py", "test_parallel_seeds.py",
    "test_static_objective.py", "test_sweeps.py", "test_extension.py", "test_workflow.py",
    "test_report.py", "test_console.py", "test_tabular_references.py",
)


def pytest_collection_modifyitems(config, items):
    rank = {name: i for i, name in enumerate(LONGEST_FILES)}
    items.sort(key=lambda item: rank.get(item.path.name, len(rank)))  # stable: file order kept


def agents_by_actions(continuous: bool) -> list[str]:
    """The registered agents that act in a continuous box (the actor-critics), or those that
    pick among discrete actions."""
    from rs_lightning.agents import AGENTS

    return sorted(n for n, (cls, _) in AGENTS.items() if cls.continuous_actions == continuous)


def replay_agents() -> list[str]:
    """The registered agents that learn from a replay memory (a loss of a replay batch); the
    on-policy agents' contract is tests/test_on_policy.py and tests/test_ppo.py."""
    from rs_lightning.agents import AGENTS

    return sorted(n for n, (cls, _) in AGENTS.items() if not cls.on_policy)


def short_finished_run(run_dir: Path, agent: str) -> Path:
    """A finished 40-update run of ``agent`` on risky rewards (debug=quick, 20 evaluation
    episodes) in ``run_dir``: what the tools read."""
    from hydra import compose, initialize_config_dir

    from rs_lightning.app.train import run

    with initialize_config_dir(config_dir=str(CONF), version_base="1.3"):
        cfg = compose("train", [f"agent={agent}", "debug=quick", "logger=none",
                                "callbacks.progress_bar=false", "trainer.max_steps=40",
                                "evaluation.episodes=20"])
    run(cfg, run_dir=run_dir)
    return run_dir


def run_and_resume_from_step_100(make_config, folder: Path, seeds: int) -> tuple[dict, dict]:
    """A run of ``make_config()`` (checkpoints every 100 updates), then the same run resumed
    from its step-100 checkpoint in another folder: both summaries, after checking that the
    resumed run ends exactly as the uninterrupted one, its ``eval.json`` of each of
    ``seeds`` members included."""
    from rs_lightning.app.train import run

    full = run(make_config(), run_dir=folder / "full")
    checkpoint = folder / "full" / "checkpoints" / "step0000100.ckpt"
    resumed = run(make_config(f"ckpt_path={checkpoint}"), run_dir=folder / "resumed")
    assert resumed == full
    for seed in range(seeds):
        assert ((folder / "resumed" / f"seed_{seed}" / "eval.json").read_text()
                == (folder / "full" / f"seed_{seed}" / "eval.json").read_text())
    return full, resumed


def play_tabular_policy(env, policy, episodes: int, gamma: float, seed: int = 0):
    """Play the state -> action table ``policy`` for ``episodes`` episodes (reset with
    seeds seed, seed + 1, ...): each episode's discounted return and its last step's
    ``info["risk_outcome"]`` (None where the environment gives none)."""
    import numpy as np

    returns, outcomes = np.empty(episodes), [None] * episodes
    for i in range(episodes):
        state, _ = env.reset(seed=seed + i)
        total, discount, done = 0.0, 1.0, False
        while not done:
            state, reward, terminated, truncated, info = env.step(int(policy[state]))
            total += discount * reward
            discount *= gamma
            done = terminated or truncated
        returns[i], outcomes[i] = total, info.get("risk_outcome")
    return returns, outcomes
