"""End-to-end runs: the used-by commands as a user types them, determinism and resume."""

from __future__ import annotations

import csv
import json
import os
import random
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from rs_lightning.app.train import run
from tests.conftest import ROOT
from tests.warm_python import command as python_command


def train_cli(*args: str, cwd: Path = ROOT) -> subprocess.CompletedProcess:
    env = dict(os.environ, WANDB_MODE="offline", HYDRA_FULL_ERROR="0")
    return subprocess.run(
        [*python_command(), str(ROOT / "train.py"), *args],
        cwd=cwd, env=env, capture_output=True, text=True, timeout=300, stdin=subprocess.DEVNULL,
    )


def test_used_by_command_runs_with_quick_debug(tmp_path):
    run_dir = tmp_path / "run"
    result = train_cli(
        "env=risky_transitions", "risk=cvar", "alpha=0.3", "debug=quick",
        f"hydra.run.dir={run_dir}",
    )
    assert result.returncode == 0, result.stderr[-3000:]
    summary = json.loads((run_dir / "eval.json").read_text())
    assert summary["env"] == "rs_lightning/RiskyTransitions-v0"
    assert summary["risk"] == "cvar" and summary["alpha"] == 0.3
    assert summary["episodes"] == 500 and summary["steps"] == 300
    for key in ("expectation", "var", "cvar", "utility", "risk_outcome"):
        assert isinstance(summary[key], float)
    assert summary["cvar"] <= summary["var"] <= max(summary["expectation"], summary["var"])
    policy = json.loads((run_dir / "policy.json").read_text())
    # The action of every cell, and the names of the actions the numbers stand for.
    assert policy.pop("action_names") == ["right", "down", "left", "up"]
    assert sorted(policy) == sorted(f"{x},{y}" for x in range(3) for y in range(3))
    assert set(policy.values()) <= {0, 1, 2, 3}
    assert (run_dir / "checkpoints" / "last.ckpt").is_file()
    history = [json.loads(line) for line in (run_dir / "eval_history.jsonl").read_text().splitlines()]
    assert [h["step"] for h in history] == [150, 300]  # debug=quick evaluates every 150 updates
    assert all(h["episodes"] == 100 for h in history)
    assert 0 < history[0]["train_seconds"] < history[1]["train_seconds"]  # wall clock of training
    assert list((run_dir / "wandb").glob("offline-run-*")), "no offline W&B run was written"


def test_multirun_runs_each_seed_as_its_own_grouped_wandb_run(tmp_path):
    sweep_dir = tmp_path / "sweep"
    # Short jobs (50 updates, no periodic evaluation): the W&B runs and their group are the point.
    result = train_cli("-m", "seed=0,1,2", "debug=quick", "trainer.max_steps=50",
                       "evaluation.every_n_steps=0", "evaluation.episodes=20",
                       f"hydra.sweep.dir={sweep_dir}")
    assert result.returncode == 0, result.stderr[-3000:]
    jobs = sorted(p for p in sweep_dir.iterdir() if p.is_dir() and (p / "eval.json").exists())
    assert [json.loads((j / "eval.json").read_text())["seed"] for j in jobs] == [0, 1, 2]
    runs = [next((j / "wandb").glob("offline-run-*")) for j in jobs]
    assert len({r.name for r in runs}) == 3
    # Each run's debug log records the sweep folder's name as the W&B group.
    for r in runs:
        assert sweep_dir.name in (r / "logs" / "debug.log").read_text()


def quick(compose, *overrides):
    return compose(["debug=quick", "logger=none", "callbacks.progress_bar=false", *overrides])


def test_same_seed_gives_the_same_eval_json(compose, tmp_path):
    # Half the quick run: one periodic evaluation, checkpoints, the final evaluation.
    first = run(quick(compose, "seed=7", "trainer.max_steps=150"), run_dir=tmp_path / "a")
    second = run(quick(compose, "seed=7", "trainer.max_steps=150"), run_dir=tmp_path / "b")
    assert (tmp_path / "a" / "eval.json").read_text() == (tmp_path / "b" / "eval.json").read_text()
    other = run(quick(compose, "seed=8", "trainer.max_steps=150"), run_dir=tmp_path / "c")
    assert other["expectation"] != first["expectation"] or other["var"] != second["var"]


# Long enough to be killed mid-way after the first checkpoint (every 50 updates).
KILLABLE = {"dqn": "trainer.max_steps=1000", "rs_umdqn_c": "trainer.max_steps=300"}


# The paper's agent is the default case: no other test of the default suite resumes it and
# compares (test_agents.py's resume test takes the other agents, with -m slow). DQN's resume
# from last.ckpt, the file a kill can catch mid-write, runs with -m slow: the default suite
# resumes DQN from last.ckpt after SIGTERM (below, and test_faults.py in every phase) and
# kills a process mid-write of a checkpoint (test_faults.py).
@pytest.mark.parametrize("agent, resume_from", [
    pytest.param("dqn", "last.ckpt", marks=pytest.mark.slow), ("rs_umdqn_c", "newest step")])
def test_run_killed_with_sigkill_resumes_to_the_same_eval_json(compose, tmp_path, agent, resume_from):
    overrides = [
        "debug=quick", "logger=none", "callbacks.progress_bar=false", f"agent={agent}",
        KILLABLE[agent], "trainer.checkpoint_every_n_steps=50", "evaluation.every_n_steps=100",
        "evaluation.episodes=200",
    ]
    killed = tmp_path / "killed"
    delay = random.uniform(0.0, 0.5 if agent == "dqn" else 1.0)
    with open(tmp_path / "stderr.txt", "w") as stderr:
        process = subprocess.Popen(
            [sys.executable, str(ROOT / "train.py"), *overrides, f"hydra.run.dir={killed}"],
            cwd=ROOT, env=dict(os.environ, WANDB_MODE="offline"), stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL, stderr=stderr, start_new_session=True,
        )
        first = killed / "checkpoints" / "step0000050.ckpt"
        deadline = time.monotonic() + 240
        while not first.exists() and process.poll() is None and time.monotonic() < deadline:
            time.sleep(0.01)
        time.sleep(delay)  # an arbitrary step after the first checkpoint
        os.killpg(process.pid, signal.SIGKILL)
        process.wait()
    assert process.returncode == -signal.SIGKILL, (tmp_path / "stderr.txt").read_text()[-3000:]
    assert not (killed / "eval.json").exists(), "the run ended before the kill: make it longer"

    if resume_from == "last.ckpt":
        checkpoint = killed / "checkpoints" / "last.ckpt"
    else:
        checkpoint = max((killed / "checkpoints").glob("step*.ckpt"))
    resumed = run(compose([*overrides, f"ckpt_path={checkpoint}"]), run_dir=tmp_path / "resumed")
    full = run(compose(overrides), run_dir=tmp_path / "full")
    start = json.loads((tmp_path / "resumed" / "attempts.jsonl").read_text())["start_step"]
    assert 50 <= start < resumed["steps"], f"killed {delay:.2f} s after the first checkpoint"
    assert (tmp_path / "resumed" / "eval.json").read_text() == (tmp_path / "full" / "eval.json").read_text()
    assert resumed == full


def test_run_stopped_by_sigterm_saves_its_state_and_the_same_command_resumes_it(compose,
                                                                             tmp_path):
    """A scheduler's SIGTERM: exit status 143 and one line naming the checkpoint, written at
    the step it stopped (no periodic checkpoints here, so nothing else could resume it); the
    same command then ends with the uninterrupted run's results."""
    overrides = [
        "debug=quick", "logger=csv", "callbacks.progress_bar=false", "agent=dqn",
        "trainer.max_steps=1000", "trainer.checkpoint_every_n_steps=0",
        "evaluation.every_n_steps=100", "evaluation.episodes=200",
    ]
    stopped = tmp_path / "stopped"
    with open(tmp_path / "stderr.txt", "w") as stderr:
        process = subprocess.Popen(
            [sys.executable, str(ROOT / "train.py"), *overrides, f"hydra.run.dir={stopped}"],
            cwd=ROOT, env=dict(os.environ, WANDB_MODE="offline"), stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL, stderr=stderr,
        )
        history = stopped / "eval_history.jsonl"
        deadline = time.monotonic() + 240
        while not history.exists() and process.poll() is None and time.monotonic() < deadline:
            time.sleep(0.01)
        time.sleep(random.uniform(0.0, 0.3))
        process.send_signal(signal.SIGTERM)
        process.wait()
    message = (tmp_path / "stderr.txt").read_text()
    assert process.returncode == 143, message[-3000:]
    assert not (stopped / "eval.json").exists(), "the run ended before the signal"
    assert message.count("Stopped by SIGTERM") == 1 and "last.ckpt (update" in message
    assert [p.name for p in (stopped / "checkpoints").glob("*.ckpt")] == ["last.ckpt"]

    from rs_lightning.app.jobs import skip_resume_or_run

    resumed = skip_resume_or_run(compose(overrides), stopped)  # what the same command runs
    full = run(compose(overrides), run_dir=tmp_path / "full")
    attempts = [json.loads(line) for line in (stopped / "attempts.jsonl").read_text().splitlines()]
    assert 100 <= attempts[-1]["start_step"] < 1000
    assert (stopped / "eval.json").read_text() == (tmp_path / "full" / "eval.json").read_text()
    assert resumed == full
    # The metrics logged before the signal stay in metrics.csv, each step once.
    assert csv_steps(stopped) == csv_steps(tmp_path / "full")


def test_a_stop_inside_a_logging_window_resumes_to_the_same_metrics(compose, tmp_path,
                                                                   monkeypatch):
    """SIGTERM right after an episode ends, between two train/ rows: the episodes of the open
    window travel in the checkpoint, so the resumed run's metrics.csv equals the
    uninterrupted run's, value for value (but the wall-clock speed)."""
    from rs_lightning.app.jobs import run_job
    from rs_lightning.engine.learner import QLearning

    overrides = ["debug=quick", "logger=csv", "callbacks.progress_bar=false", "agent=dqn",
                 "trainer.checkpoint_every_n_steps=0"]
    run(compose(overrides), run_dir=tmp_path / "full")
    real = QLearning._log_episodes
    stopped_at = []

    def signalled(self, k, step, *args):
        real(self, k, step, *args)
        if step % 50 > 10 and step > 100 and not stopped_at:  # log rows come every 50 steps
            stopped_at.append(step)
            os.kill(os.getpid(), signal.SIGTERM)  # delivered before the next bytecode

    stopped = tmp_path / "stopped"
    stopped.mkdir()
    monkeypatch.chdir(stopped)
    with monkeypatch.context() as patch:
        patch.setattr(QLearning, "_log_episodes", signalled)
        with pytest.raises(SystemExit) as stop:
            run_job(compose(overrides))
    assert stop.value.code == 143 and stopped_at
    run_job(compose(overrides))
    assert csv_rows(stopped) == csv_rows(tmp_path / "full")


def csv_rows(run_dir) -> list[dict[str, str]]:
    with open(run_dir / "csv" / "metrics.csv", newline="") as file:
        return [{k: v for k, v in row.items() if k != "train/steps_per_second"}
                for row in csv.DictReader(file)]


def csv_steps(run_dir) -> list[tuple[int, str]]:
    """(step, logged keys) of each row of a run's metrics.csv."""
    with open(run_dir / "csv" / "metrics.csv", newline="") as file:
        return [(int(row["step"]), ",".join(k for k, v in row.items() if v not in ("", None)))
                for row in csv.DictReader(file)]


def test_missing_checkpoint_is_a_config_error(compose, tmp_path):
    from rs_lightning.errors import ConfigError

    with pytest.raises(ConfigError, match="ckpt_path"):
        run(quick(compose, f"ckpt_path={tmp_path / 'nothing.ckpt'}"), run_dir=tmp_path / "r")


@pytest.mark.slow
def test_rs_umdqn_c_quick_run_from_the_command_line(tmp_path):
    run_dir = tmp_path / "run"
    result = train_cli(
        "agent=rs_umdqn_c", "env=risky_grid_world", "risk=cvar", "debug=quick", "logger=csv",
        f"hydra.run.dir={run_dir}",
    )
    assert result.returncode == 0, result.stderr[-3000:]
    summary = json.loads((run_dir / "eval.json").read_text())
    assert (summary["agent"], summary["risk"], summary["steps"]) == ("rs_umdqn_c", "cvar", 300)
    metrics = (run_dir / "csv" / "metrics.csv").read_text().splitlines()[0].split(",")
    assert {"train/loss", "train/return_mean", "episode/return", "eval/utility"} <= set(metrics)


@pytest.mark.slow
def test_compiled_agent_trains_like_the_eager_one(compose, tmp_path):
    """hardware.compile=true compiles the loss and the return distribution (about a minute of
    compilation on a CPU); the run ends with the eager run's greedy policy."""
    from rs_lightning.app.train import run

    quick = ["debug=quick", "logger=none", "callbacks.progress_bar=false", "agent=dqn",
             "trainer.max_steps=150", "evaluation.every_n_steps=0"]
    eager = run(compose(quick), run_dir=tmp_path / "eager")
    compiled = run(compose([*quick, "hardware.compile=true"]), run_dir=tmp_path / "compiled")
    assert (tmp_path / "compiled" / "policy.json").read_text() == (
        tmp_path / "eager" / "policy.json").read_text()
    assert compiled["expectation"] == pytest.approx(eager["expectation"], abs=1e-9)


@pytest.mark.slow
def test_a_support_too_narrow_for_the_learned_law_is_warned_of_once(tmp_path):
    """C51 on risky rewards with the support [-0.3, 0.3]: the goals' +-1 returns pile on the
    end atoms, and the run says so once, naming the keys; the default support says nothing."""
    settled = "learning.target_update_period=10"  # judged from 10 target copies and half the budget
    narrow = train_cli("agent=c51", "debug=quick", "logger=csv", "env.return_min=-0.3",
                       "env.return_max=0.3", settled, f"hydra.run.dir={tmp_path / 'narrow'}")
    assert narrow.returncode == 0, narrow.stderr[-3000:]
    warnings = [line for line in (narrow.stdout + narrow.stderr).splitlines()
                if "ends of the return support" in line]
    assert len(warnings) == 1, warnings
    assert "env.return_min / env.return_max" in warnings[0]
    share = float(warnings[0].split("put ")[1].split(" %")[0])
    assert share > 5.0
    # Both goals' returns lie beyond the support: mass at each end, the two summing to the share.
    lower, upper = (float(x) for x in re.findall(r"([\d.]+) % at", warnings[0]))
    assert lower > 0 and upper > 0 and abs(lower + upper - share) <= 0.11
    default = train_cli("agent=c51", "debug=quick", "logger=csv", settled,
                        f"hydra.run.dir={tmp_path / 'default'}")
    assert default.returncode == 0, default.stderr[-3000:]
    assert "ends of the return support" not in default.stdout + default.stderr


def test_a_checkpoint_naming_the_weights_agent_loads_and_resumes(compose, tmp_path):
    """Checkpoints that name the module's weights agent.* and target_agent.* (the module's
    earlier attribute names; today members.* and target_members.*) resume to the same
    eval.json and load for evaluation."""
    import torch

    from rs_lightning.analysis.runs import load_run

    overrides = ["debug=quick", "agent=c51", "logger=none", "callbacks.progress_bar=false",
                 "trainer.max_steps=200", "trainer.checkpoint_every_n_steps=100",
                 "evaluation.every_n_steps=0", "evaluation.episodes=100"]
    run(compose(overrides), run_dir=tmp_path / "full")
    state = torch.load(tmp_path / "full" / "checkpoints" / "step0000100.ckpt", weights_only=True)
    renamed = {("target_agent." + k[len("target_members."):] if k.startswith("target_members.")
                else "agent." + k[len("members."):]): v for k, v in state["state_dict"].items()}
    assert any(k.startswith("agent.") for k in renamed) and len(renamed) == len(state["state_dict"])
    state["state_dict"] = renamed
    del state["rs_lightning"]["format_version"]  # as checkpoints of those versions: no format
    earlier = tmp_path / "earlier.ckpt"
    torch.save(state, earlier)
    run(compose([*overrides, f"ckpt_path={earlier}"]), run_dir=tmp_path / "resumed")
    assert ((tmp_path / "resumed" / "eval.json").read_text()
            == (tmp_path / "full" / "eval.json").read_text())
    loaded = load_run(tmp_path / "full", checkpoint="../earlier.ckpt")
    assert loaded.steps == 100


def test_sigterm_during_a_long_warm_up_stops_the_run_within_seconds(tmp_path):
    """The warm-up collects inside the first update: a SIGTERM there stops the run as one
    at the end of an update does (status 143, one line, the state saved: no update made,
    the transitions collected so far kept)."""
    import torch

    run_dir = tmp_path / "run"
    with open(tmp_path / "stderr.txt", "w") as stderr:
        process = subprocess.Popen(
            [sys.executable, str(ROOT / "train.py"), "debug=quick", "logger=none",
             "callbacks.progress_bar=false", "learning.warmup_steps=2000000",
             "learning.replay_capacity=2000000", f"hydra.run.dir={run_dir}"],
            cwd=ROOT, env=dict(os.environ, WANDB_MODE="offline"), stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL, stderr=stderr)
        deadline = time.monotonic() + 240
        while not (run_dir / "attempts.jsonl").exists() and time.monotonic() < deadline:
            time.sleep(0.05)
        time.sleep(3.0)  # inside the warm-up by now (about 10^4 transitions a second)
        process.send_signal(signal.SIGTERM)
        sent = time.monotonic()
        process.wait(timeout=60)
        took = time.monotonic() - sent
    message = (tmp_path / "stderr.txt").read_text()
    assert process.returncode == 143, message[-3000:]
    assert took < 10 and message.count("Stopped by SIGTERM") == 1, message[-3000:]
    state = torch.load(run_dir / "checkpoints" / "last.ckpt", weights_only=True)
    assert state["global_step"] == 0
    assert 0 < state["ExperienceDataModule"]["collector"]["env_steps"] < 2_000_000


def test_a_resume_learns_with_the_optimizer_settings_its_config_records(compose, tmp_path):
    """learning.lr and learning.adam_eps given with ckpt_path= are what the resumed run's
    Adam uses (and what its config.yaml says); the checkpoint's values do not come back."""
    import torch
    import yaml

    overrides = ["debug=quick", "agent=dqn", "logger=none", "callbacks.progress_bar=false",
                 "trainer.max_steps=100", "trainer.checkpoint_every_n_steps=50",
                 "evaluation.every_n_steps=0", "evaluation.episodes=20"]
    run(compose(overrides), run_dir=tmp_path / "first")
    checkpoint = tmp_path / "first" / "checkpoints" / "step0000050.ckpt"
    changed = ["trainer.max_steps=120", "learning.lr=0.0123", "learning.adam_eps=0.0007"]
    run(compose([*overrides, *changed, f"ckpt_path={checkpoint}"]), run_dir=tmp_path / "resumed")
    state = torch.load(tmp_path / "resumed" / "checkpoints" / "last.ckpt", weights_only=True)
    (group,) = state["optimizer_states"][0]["param_groups"]
    assert (group["lr"], group["eps"]) == (0.0123, 0.0007)
    recorded = yaml.safe_load((tmp_path / "resumed" / "config.yaml").read_text())["learning"]
    assert (recorded["lr"], recorded["adam_eps"]) == (0.0123, 0.0007)
    first = torch.load(checkpoint, weights_only=True)["optimizer_states"][0]["param_groups"][0]
    assert first["lr"] != 0.0123
