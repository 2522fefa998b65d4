"""Checkpoints on a wall-clock period (trainer.checkpoint_every_minutes) resume exactly, and a
run that starts over because an earlier attempt left no checkpoint says how much it lost."""

from __future__ import annotations

import pytest
import torch

from rs_lightning.app.train import run
from rs_lightning.errors import NumericalFault

QUICK = ["debug=quick", "logger=none", "callbacks.progress_bar=false", "trainer.max_steps=80",
         "trainer.checkpoint_every_n_steps=0", "evaluation.every_n_steps=25",
         "evaluation.episodes=50", "evaluation.episodes_during_training=20"]


@pytest.mark.slow  # three runs
def test_a_wall_clock_checkpoint_is_written_without_step_checkpoints_and_resumes_exactly(
        compose, tmp_path):
    """Every 30 ms of training last.ckpt is replaced; a run stopped at update 60 (a NaN
    loss) keeps one from before it, and resuming from it gives the uninterrupted run's
    eval.json."""
    every = "trainer.checkpoint_every_minutes=0.0005"
    with pytest.raises(NumericalFault):
        run(compose([*QUICK, every, "fault_injection.nan_loss_at_step=60"]),
            run_dir=tmp_path / "stopped")
    checkpoints = tmp_path / "stopped" / "checkpoints"
    assert [p.name for p in checkpoints.glob("*.ckpt")] == ["last.ckpt"]
    step = torch.load(checkpoints / "last.ckpt", weights_only=True)["global_step"]
    assert 0 < step < 60
    resumed = run(compose([*QUICK, every, f"ckpt_path={checkpoints / 'last.ckpt'}"]),
                  run_dir=tmp_path / "resumed")
    full = run(compose([*QUICK, every]), run_dir=tmp_path / "full")
    assert (tmp_path / "resumed" / "eval.json").read_text() == (
        tmp_path / "full" / "eval.json").read_text()
    assert resumed == full


def test_starting_over_after_an_attempt_without_a_checkpoint_says_what_is_lost(
        compose, tmp_path, capfd):
    off = "trainer.checkpoint_every_minutes=0"
    with pytest.raises(NumericalFault):
        run(compose([*QUICK, off, "fault_injection.nan_loss_at_step=60"]), run_dir=tmp_path)
    assert not list((tmp_path / "checkpoints").glob("*.ckpt"))
    capfd.readouterr()
    run(compose([*QUICK, off]), run_dir=tmp_path)
    lines = [line for line in capfd.readouterr().err.splitlines() if "earlier attempt" in line]
    assert lines == [
        f"[rs_lightning] an earlier attempt in {tmp_path} stopped before its first checkpoint: "
        "training starts over from step 0 and its 50 updates (its last record) are lost; "
        "checkpoints: only at the end"]
