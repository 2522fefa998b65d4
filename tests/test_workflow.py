"""The research workflow around a sweep: run folder and W&B names that tell settings apart,
and offline W&B runs to the web in one command (``rs-lightning report --sync``).

The W&B server is not reached here: ``wandb sync`` and the Report's ``save`` are the two
calls replaced, with the offline run folders of a real sweep as what they are given.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

import rs_lightning.analysis.report as report_module
import rs_lightning.app.commands.report as report_command
from rs_lightning.analysis.report import (
    SweepReport,
    build_report,
    report_run_id,
    training_run_folders,
)
from rs_lightning.app.commands.report import main
from rs_lightning.app.run_names import resume_marker, wandb_run_names
from tests.conftest import ROOT
from tests.wandb_files import run_record
from tests.warm_python import command as python_command

TINY = ["debug=quick", "trainer.max_steps=60", "evaluation.episodes=50",
        "evaluation.every_n_steps=30", "evaluation.episodes_during_training=20",
        "callbacks.progress_bar=false"]


@pytest.fixture(scope="module")
def lr_sweep(tmp_path_factory):
    """A real sweep over the learning rate, logging to offline W&B runs."""
    sweep_dir = tmp_path_factory.mktemp("lr_sweep")
    result = subprocess.run(
        [*python_command(), "train.py", "-m", "agent=dqn", "learning.lr=1e-4,1e-2", *TINY,
         f"hydra.sweep.dir={sweep_dir}"],
        cwd=ROOT, env=dict(os.environ, WANDB_MODE="offline"), capture_output=True, text=True,
        stdin=subprocess.DEVNULL, timeout=300,
    )
    assert result.returncode == 0, result.stderr[-3000:]
    return sweep_dir


def test_folders_and_wandb_runs_are_named_by_their_overrides(lr_sweep):
    jobs = sorted(p for p in lr_sweep.iterdir() if (p / "eval.json").is_file())
    settings = "agent=dqn,debug=quick,evaluation.episodes=50,evaluation.episodes_during_training=20,evaluation.every_n_steps=30,learning.lr={lr},trainer.max_steps=60"
    assert [job.name for job in jobs] == [f"{n}_{settings.format(lr=lr)}"
                                          for n, lr in ((0, "0.0001"), (1, "0.01"))]
    runs = [run_record(next((job / "wandb").glob("offline-run-*"))) for job in jobs]
    # Runs of different learning rates have different names; the seed is in the name, the
    # sweep is the group.
    assert [run.display_name for run in runs] == [f"{settings.format(lr=lr)},seed=0"
                                                  for lr in ("0.0001", "0.01")]
    assert {run.run_group for run in runs} == {lr_sweep.name}
    assert {run.job_type for run in runs} == {"train"}


def test_names_outside_a_sweep_and_of_resumed_runs():
    assert resume_marker(None) == ""
    assert resume_marker("outputs/runs/x/checkpoints/step0000100.ckpt") == "_resumed-step0000100"
    # A single run: the seeds of one setting share the group.
    assert wandb_run_names("dqn", "rs_lightning/RiskyRewards-v0", 3, None, "", None) == (
        "dqn-RiskyRewards-v0,seed=3", "dqn-RiskyRewards-v0")
    name, group = wandb_run_names("dqn", "CartPole-v1", 1, "/a/last.ckpt", "learning.lr=0.01", None)
    assert (name, group) == ("learning.lr=0.01,seed=1_resumed-last", "learning.lr=0.01")


def test_folder_names_show_debug_and_resumes(tmp_path):
    from hydra import compose, initialize_config_dir

    ckpt = tmp_path / "run" / "checkpoints" / "step0000100.ckpt"
    with initialize_config_dir(config_dir=str(ROOT / "conf"), version_base="1.3"):
        fresh = compose("train", ["debug=quick", "agent=dqn", "seed=2"], return_hydra_config=True)
        resumed = compose("train", ["debug=quick", "agent=dqn", f"ckpt_path={ckpt}"],
                          return_hydra_config=True)
    assert fresh.hydra.run.dir.endswith("_agent=dqn,debug=quick,seed=2")
    assert resumed.hydra.run.dir.endswith("_agent=dqn,debug=quick_resumed-step0000100")
    assert "/" not in resumed.hydra.run.dir.split("outputs/runs/")[1]
    # A sweep's job folders: named by the command alone, so the same command finds them again
    # (and resumes them in place); a sweep started from a checkpoint is marked.
    for cfg in (fresh, resumed):
        cfg.hydra.job.num = 0
    assert fresh.hydra.sweep.subdir == "0_agent=dqn,debug=quick,seed=2"
    assert resumed.hydra.sweep.subdir == "0_agent=dqn,debug=quick_resumed-step0000100"


class FakeServer:
    """Stands for the W&B server: records what would be uploaded, in order."""

    def __init__(self):
        self.synced: list[list[Path]] = []
        self.reports: list = []

    def sync(self, folders):
        self.synced.append([Path(f) for f in folders])
        return 0

    def save(self, spec):
        self.reports.append(spec)
        return "https://wandb.example/report"


@pytest.fixture
def server(monkeypatch):
    fake = FakeServer()
    monkeypatch.setattr(report_command, "wandb_online_problem", lambda timeout: None)
    monkeypatch.setattr(report_module, "run_wandb_sync", fake.sync)
    monkeypatch.setattr(report_module, "save_wandb_report", fake.save)
    return fake


def test_sync_uploads_training_runs_then_the_report_run_then_the_report(lr_sweep, server, capsys):
    training = sorted(lr_sweep.glob("*/wandb/offline-run-*"))
    assert len(training) == 2
    assert main([str(lr_sweep), "--sync"]) == 0
    first_report_run = server.synced[1]
    assert server.synced == [training, first_report_run]
    (report_run,) = first_report_run
    assert report_run.parent == lr_sweep / "report" / "wandb"
    assert report_run.name.endswith("-" + report_run_id(build_report(lr_sweep)))
    assert run_record(report_run).job_type == "report"
    assert run_record(report_run).run_group == lr_sweep.name
    # The Report is created last, over the sweep's group.
    (spec,) = server.reports
    assert lr_sweep.name in spec.title
    assert "W&B report: https://wandb.example/report" in capsys.readouterr().out

    # A rerun uploads a new report run under the same id (it replaces the first one) and
    # does not count the report runs as training runs.
    assert main([str(lr_sweep), "--sync"]) == 0
    assert server.synced[2] == training
    (second,) = server.synced[3]
    assert second != report_run and second.name.split("-")[-1] == report_run.name.split("-")[-1]
    assert run_record(second).run_id == run_record(report_run).run_id
    assert training_run_folders(build_report(lr_sweep)) == training


def test_wandb_sync_takes_the_training_run_folders(lr_sweep):
    """The real `wandb sync`, in its dry-run mode: it reads every folder given as a run."""
    folders = training_run_folders(SweepReport(lr_sweep, lr_sweep / "report", [], ""))
    result = subprocess.run([sys.executable, "-m", "wandb", "sync", "--dry-run", *map(str, folders)],
                            capture_output=True, text=True, timeout=120, stdin=subprocess.DEVNULL)
    assert result.returncode == 0, result.stderr[-2000:]
    assert f"Would sync {len(folders)} run(s)" in result.stdout + result.stderr
    for folder in folders:
        assert folder.name.split("-")[-1] in result.stdout + result.stderr


def test_sync_without_credentials_uploads_nothing(lr_sweep, tmp_path, monkeypatch, capsys):
    monkeypatch.delenv("WANDB_API_KEY", raising=False)
    monkeypatch.setenv("NETRC", str(tmp_path / "no-netrc"))
    calls = []
    monkeypatch.setattr(report_module, "run_wandb_sync", lambda folders: calls.append(folders))
    assert main([str(lr_sweep), "--sync", "--out", str(tmp_path / "report")]) == 2
    assert "error: --sync: no W&B credentials" in capsys.readouterr().err
    assert calls == [] and not (tmp_path / "report").exists()


def test_report_after_an_online_fallback_says_offline(lr_sweep, tmp_path, monkeypatch, capsys):
    monkeypatch.delenv("WANDB_API_KEY", raising=False)
    monkeypatch.setenv("NETRC", str(tmp_path / "no-netrc"))
    out = tmp_path / "report"
    assert main([str(lr_sweep), "--wandb", "online", "--wandb-report", "--out", str(out)]) == 1
    captured = capsys.readouterr()
    assert "W&B summary run (offline)" in captured.out and "(online)" not in captured.out
    assert "--sync` uploads the runs and creates it" in captured.err


def test_long_override_labels_are_cut_with_a_hash_that_keeps_them_apart():
    from rs_lightning.app.run_names import FOLDER_LABEL_LIMIT, folder_label

    assert folder_label("agent=dqn,seed=0") == "agent=dqn,seed=0"
    long_a = ",".join(f"key{i}=0.00012520653814999459" for i in range(12))
    long_b = long_a.replace("key11", "key12")
    assert len(folder_label(long_a)) == FOLDER_LABEL_LIMIT
    assert folder_label(long_a) == folder_label(long_a)  # a sweep run again finds its folder
    assert folder_label(long_a) != folder_label(long_b)
    assert folder_label(long_a).startswith(long_a[:100])
