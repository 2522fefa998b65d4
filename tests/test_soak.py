"""Soak test (slow): a sweep of 24 tiny jobs killed with SIGKILL at random moments and started
again with the same command until it completes; every job's eval.json must then be
byte-identical to that of an uninterrupted run of the same sweep.

Run it with ``pytest -m slow tests/test_soak.py``; ``SOAK_SEED`` fixes the kill moments.
"""

from __future__ import annotations

import os
import random
import signal
import subprocess
import sys
import time

import pytest

from tests.conftest import ROOT

# 2 agents x 12 seeds; each job: 100 updates, checkpoints every 25, two periodic evaluations.
SWEEP = [
    "-m", "agent=dqn,qr_dqn", "seed=0,1,2,3,4,5,6,7,8,9,10,11", "debug=quick", "logger=none",
    "callbacks.progress_bar=false", "trainer.max_steps=100", "trainer.checkpoint_every_n_steps=25",
    "evaluation.every_n_steps=50", "evaluation.episodes_during_training=20",
    "evaluation.episodes=100",
]
JOBS = 24


def start_sweep(sweep_dir, log) -> subprocess.Popen:
    return subprocess.Popen(
        [sys.executable, str(ROOT / "train.py"), *SWEEP, f"hydra.sweep.dir={sweep_dir}"],
        cwd=ROOT, env=dict(os.environ, WANDB_MODE="offline"), stdin=subprocess.DEVNULL,
        stdout=log, stderr=log, start_new_session=True,
    )


def eval_jsons(sweep_dir) -> dict[str, bytes]:
    return {p.parent.name: p.read_bytes() for p in sorted(sweep_dir.glob("*/eval.json"))}


@pytest.mark.slow
def test_a_sweep_killed_at_random_moments_ends_as_an_uninterrupted_one(tmp_path):
    rng = random.Random(int(os.environ.get("SOAK_SEED", random.randrange(10**6))))
    started = time.monotonic()
    with open(tmp_path / "uninterrupted.log", "w") as log:
        reference = start_sweep(tmp_path / "uninterrupted", log)
        assert reference.wait(timeout=3600) == 0, (tmp_path / "uninterrupted.log").read_text()[-3000:]
    expected = eval_jsons(tmp_path / "uninterrupted")
    assert len(expected) == JOBS
    uninterrupted_seconds = time.monotonic() - started

    killed = tmp_path / "killed"
    kills = 0
    with open(tmp_path / "killed.log", "w") as log:
        for attempt in range(200):
            process = start_sweep(killed, log)
            # A moment anywhere in a job: start-up, training, checkpoints, evaluations, writes.
            try:
                status = process.wait(timeout=rng.uniform(2.0, 12.0))
            except subprocess.TimeoutExpired:
                os.killpg(process.pid, signal.SIGKILL)
                process.wait()
                kills += 1
                continue
            assert status == 0, (tmp_path / "killed.log").read_text()[-3000:]
            break
        else:
            pytest.fail("the sweep never completed")
    print(f"soak: {kills} kills, uninterrupted sweep {uninterrupted_seconds:.0f} s, "
          f"whole test {time.monotonic() - started:.0f} s")
    assert kills >= 5, "too few kills to test anything: the jobs are too short"
    assert eval_jsons(killed) == expected
