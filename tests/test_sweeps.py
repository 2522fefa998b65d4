"""Sweeps: a failing job does not stop or lose the others, and the same command run again
skips the finished jobs and resumes the interrupted ones, exactly."""

from __future__ import annotations

import json
import os
import random
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from rs_lightning.analysis.results import collect
from tests.conftest import ROOT
from tests.warm_python import command as python_command

# Short jobs: 100 updates, a checkpoint and an evaluation every 50.
SHORT_JOBS = [
    "agent=dqn", "logger=none", "callbacks.progress_bar=false", "debug=quick",
    "trainer.max_steps=100", "trainer.checkpoint_every_n_steps=50", "evaluation.episodes=50",
    "evaluation.every_n_steps=50", "evaluation.episodes_during_training=20",
]


def sweep(sweep_dir: Path, *args: str, **popen) -> subprocess.CompletedProcess:
    return subprocess.run(
        [*python_command(), str(ROOT / "train.py"), "-m", *SHORT_JOBS, *args,
         f"hydra.sweep.dir={sweep_dir}"],
        cwd=ROOT, env=dict(os.environ, WANDB_MODE="offline"), capture_output=True, text=True,
        timeout=600, stdin=subprocess.DEVNULL, **popen,
    )


def jobs(sweep_dir: Path) -> list[Path]:
    return sorted((p for p in sweep_dir.iterdir() if p.is_dir()),
                  key=lambda p: int(p.name.split("_")[0]))


def attempts(job: Path) -> list[dict]:
    path = job / "attempts.jsonl"
    return [json.loads(line) for line in path.read_text().splitlines()] if path.exists() else []


def test_failing_jobs_do_not_stop_the_sweep_and_are_summarised(tmp_path, capsys):
    # Jobs 0 and 1 have a bad alpha, job 2 meets a NaN loss, job 3 is fine and runs last.
    # Without the callback that refuses such a sweep before it starts, the jobs' own checks
    # fail jobs 0 and 1 (tests/test_sweep_validation.py: with it, nothing runs).
    result = sweep(tmp_path, "alpha=1.5,0.5", "fault_injection.nan_loss_at_step=30,null",
                   "~hydra.callbacks.check_inputs")
    assert result.returncode == 1, result.stderr[-3000:]
    job0, job1, job2, job3 = jobs(tmp_path)
    assert json.loads((job3 / "eval.json").read_text())["steps"] == 100
    for job in (job0, job1):
        failure = json.loads((job / "failed.json").read_text())
        assert failure["error"] == "ConfigError" and failure["key"] == "alpha"
        assert "Traceback" in failure["traceback"]
    failure = json.loads((job2 / "failed.json").read_text())
    assert (failure["error"], failure["step"]) == ("NumericalFault", 30)
    assert failure["message"].startswith("non-finite loss (nan) at step 30")

    summary = result.stderr[result.stderr.index(f"[rs_lightning] sweep {tmp_path}"):]
    assert summary.startswith(f"[rs_lightning] sweep {tmp_path}: jobs 1 finished, 3 failed")
    assert f"FAILED {job0.name}: ConfigError: alpha: must be in [0, 1], got 1.5" in summary
    assert f"FAILED {job2.name}: NumericalFault: non-finite loss (nan) at step 30" in summary
    assert f"rs-lightning report {tmp_path}" in summary  # what to run next

    rows = collect(tmp_path)  # what the results table and the report read
    assert [row["job"] for row in rows] == [job3.name]
    warnings = capsys.readouterr().err
    assert all(f"skipping failed job {job.name}" in warnings for job in (job0, job1, job2))


def test_the_same_sweep_again_skips_finished_jobs_and_resumes_the_others(tmp_path):
    first = sweep(tmp_path, "seed=0,1")
    assert first.returncode == 0, first.stderr[-3000:]
    done, interrupted = jobs(tmp_path)
    expected_eval = (interrupted / "eval.json").read_text()
    expected_history = history_without_clock(interrupted)
    finished_at = (done / "eval.json").stat().st_mtime_ns

    # Interrupt the second job after its step-50 checkpoint, the way a kill can leave it: no
    # results, a truncated last.ckpt (as a non-atomic write would leave), an evaluation made
    # after the checkpoint and a line cut short in the history.
    for name in ("eval.json", "policy.json", "checkpoints/step0000100.ckpt"):
        (interrupted / name).unlink()
    last = interrupted / "checkpoints" / "last.ckpt"
    last.write_bytes(last.read_bytes()[:1000])
    with open(interrupted / "eval_history.jsonl", "a") as f:
        f.write('{"step": 100, "utility": 0.5}\n{"step": 1')

    again = sweep(tmp_path, "seed=0,1")
    assert again.returncode == 0, again.stderr[-3000:]
    assert f"skipping finished job {done}" in again.stderr
    assert f"ignoring {last} is not a readable checkpoint" in again.stderr
    assert f"resuming {interrupted} from step0000050.ckpt (step 50)" in again.stderr
    assert (done / "eval.json").stat().st_mtime_ns == finished_at
    assert [a["start_step"] for a in attempts(done)] == [0]  # ran once
    assert [a["start_step"] for a in attempts(interrupted)] == [0, 50]
    assert (interrupted / "eval.json").read_text() == expected_eval  # exactly as uninterrupted
    assert history_without_clock(interrupted) == expected_history
    # The clock goes on from the checkpoint: the time of the first attempt's first 50 updates
    # and the second attempt's own.
    clock = [r["train_seconds"] for r in map(json.loads, (interrupted / "eval_history.jsonl")
                                               .read_text().splitlines())]
    assert clock == sorted(clock) and clock[0] > 0


def history_without_clock(job: Path) -> list[dict]:
    """The evaluation history without its wall clock (the one thing a resume changes)."""
    lines = (job / "eval_history.jsonl").read_text().splitlines()
    return [{k: v for k, v in json.loads(line).items() if k != "train_seconds"} for line in lines]


def count_checkpoints(sweep_dir: Path) -> int:
    return len(list(sweep_dir.glob("*/checkpoints/*.ckpt")))


@pytest.mark.slow
def test_soak_a_sweep_killed_at_random_moments_ends_complete(tmp_path):
    """24 short jobs (both agents, 3 environments, 4 seeds): the whole sweep is killed with
    SIGKILL at random moments (starting up, training, writing a checkpoint or a result) and
    started again, then let run to the end. Every job ends with complete, valid outputs, no
    job runs again once finished, and every job's eval.json is byte-identical to that of an
    uninterrupted run of the same sweep."""
    # The last parameter varies fastest: the agents alternate, so both meet the kills.
    common = [a for a in SHORT_JOBS if not a.startswith("agent=")]
    args = ["seed=0,1,2,3", "env=risky_rewards,risky_transitions,risky_grid_world",
            "agent=dqn,rs_umdqn_c", "trainer.max_steps=300", "evaluation.episodes=30"]
    sweep_dir = tmp_path / "sweep"
    rng = random.Random()
    started = time.monotonic()
    finished_attempts: dict[str, int] = {}  # job -> its attempts when first seen finished
    kills, kill_rounds = 0, 10
    for round_ in range(kill_rounds + 1):
        with open(tmp_path / f"round{round_}.txt", "w") as log:
            process = subprocess.Popen(
                [sys.executable, str(ROOT / "train.py"), "-m", *common, *args,
                 f"hydra.sweep.dir={sweep_dir}"],
                cwd=ROOT, env=dict(os.environ, WANDB_MODE="offline"), stdin=subprocess.DEVNULL,
                stdout=log, stderr=log, start_new_session=True,
            )
            if round_ < kill_rounds:
                # Every third round dies starting up or in its first job; the others a random
                # moment (training, evaluating, writing) after their first new checkpoint, so
                # that the kills land mid-job however fast the machine is.
                if round_ % 3 == 0:
                    time.sleep(rng.uniform(1.0, 10.0))
                else:
                    seen = count_checkpoints(sweep_dir)
                    while count_checkpoints(sweep_dir) <= seen and process.poll() is None:
                        time.sleep(0.05)
                    time.sleep(rng.uniform(0.0, 2.0))
                if process.poll() is None:
                    os.killpg(process.pid, signal.SIGKILL)
                    kills += 1
            process.wait(timeout=3600)
        for job in (jobs(sweep_dir) if sweep_dir.exists() else []):
            if (job / "eval.json").exists():
                count = finished_attempts.setdefault(job.name, len(attempts(job)))
                assert len(attempts(job)) == count, f"{job.name} ran again after finishing"
        if process.returncode == 0:
            break
    assert process.returncode == 0, (tmp_path / f"round{round_}.txt").read_text()[-3000:]
    assert kills >= 3, "the sweep was hardly interrupted: make the jobs longer"
    all_jobs = jobs(sweep_dir)
    assert len(all_jobs) == 24
    resumed = [job for job in all_jobs if any(a["start_step"] > 0 for a in attempts(job))]
    assert resumed, "no job was killed after a checkpoint: make the jobs longer"
    for job in all_jobs:
        summary = json.loads((job / "eval.json").read_text())
        assert summary["steps"] == 300 and summary["episodes"] == 30
        assert len(json.loads((job / "policy.json").read_text())) == 9 + 1  # cells, names
        assert not (job / "failed.json").exists()
        history = [json.loads(line) for line in (job / "eval_history.jsonl").read_text().splitlines()]
        assert [h["step"] for h in history] == [50, 100, 150, 200, 250, 300]
        assert not list(job.glob("**/.*.tmp")), "a killed write's temporary file was left"
    # Every job ends exactly as in the same sweep run without interruption.
    reference = tmp_path / "uninterrupted"
    result = subprocess.run(
        [*python_command(), str(ROOT / "train.py"), "-m", *common, *args,
         f"hydra.sweep.dir={reference}"],
        cwd=ROOT, env=dict(os.environ, WANDB_MODE="offline"), capture_output=True, text=True,
        timeout=3600, stdin=subprocess.DEVNULL, check=False,
    )
    assert result.returncode == 0, result.stderr[-3000:]
    assert [job.name for job in jobs(reference)] == [job.name for job in all_jobs]
    for job in all_jobs:
        assert (job / "eval.json").read_bytes() == (reference / job.name / "eval.json").read_bytes(), \
            job.name
    print(f"soak: {kills} kills in {round_ + 1} rounds, {len(resumed)} jobs resumed after a "
          f"checkpoint, {time.monotonic() - started:.0f} s in all")
