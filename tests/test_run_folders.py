"""One writer per run folder: a second process on a folder stops at once naming the first, a
lock left by a dead process is taken over, an empty run or sweep folder is refused, and a
folder holding another config's run is never written into, by a run or a sweep job, with or
without the Hydra callback that checks inputs (the job checks them itself)."""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest

from rs_lightning.app.run_folders import LOCK, FolderInUse, RunFolderLock
from rs_lightning.app.train import run
from rs_lightning.errors import EXIT_BAD_INPUT, EXIT_TERMINATED
from tests.conftest import ROOT
from tests.warm_python import command as python_command

QUICK = ["debug=quick", "logger=none", "agent=dqn", "callbacks.progress_bar=false"]
NO_CALLBACK = "~hydra.callbacks.check_inputs"


def train_command(*args: str, cwd: Path = ROOT, timeout: float = 300) -> subprocess.CompletedProcess:
    return subprocess.run([*python_command(), str(ROOT / "train.py"), *args], cwd=cwd, check=False,
                          capture_output=True, text=True, timeout=timeout,
                          env={**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)})


def error_line(stderr: str) -> str:
    lines = [line for line in stderr.splitlines() if line.strip()]
    assert len(lines) == 1, stderr
    assert lines[0].startswith("Error in config: "), stderr
    return lines[0]


def snapshot(folder: Path) -> dict[str, str]:
    """Every file under ``folder`` with a hash of its content."""
    return {str(p.relative_to(folder)): hashlib.sha256(p.read_bytes()).hexdigest()
            for p in sorted(folder.rglob("*")) if p.is_file()}


@pytest.fixture(scope="module")
def finished_run(tmp_path_factory):
    """A finished run (seed 0) whose folder the tests aim other configs at."""
    from hydra import compose, initialize_config_dir

    from tests.conftest import CONF

    folder = tmp_path_factory.mktemp("finished") / "run"
    with initialize_config_dir(config_dir=str(CONF), version_base="1.3"):
        run(compose(config_name="train", overrides=[*QUICK, "seed=0"]), run_dir=folder)
    return folder


# ----------------------------------------------------------------------------- the lock
@pytest.mark.slow  # a real run to hold the folder: a minute on a busy machine
def test_a_second_process_on_the_same_folder_stops_at_once_naming_the_first(tmp_path):
    run_dir = tmp_path / "run"
    args = [*QUICK, "trainer.max_steps=1000000", "trainer.checkpoint_every_n_steps=0",
            f"hydra.run.dir={run_dir}"]
    first = subprocess.Popen([sys.executable, "train.py", *args], cwd=ROOT, text=True,
                             stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    try:
        deadline = time.monotonic() + 120
        while not (run_dir / "attempts.jsonl").is_file():  # it holds the folder and trains
            assert first.poll() is None and time.monotonic() < deadline, first.stderr.read()
            time.sleep(0.2)
        holder = json.loads((run_dir / LOCK).read_text())
        assert holder["pid"] == first.pid and holder["host"] == socket.gethostname()
        started = time.monotonic()
        second = train_command(*args)
        line = error_line(second.stderr)
        assert second.returncode == EXIT_BAD_INPUT
        assert f"is in use by process {first.pid} on {socket.gethostname()}" in line
        assert time.monotonic() - started < 60
        assert len((run_dir / "attempts.jsonl").read_text().splitlines()) == 1
        assert first.poll() is None  # the first goes on
    finally:
        first.send_signal(signal.SIGTERM)
        first.wait(timeout=120)
    assert first.returncode == EXIT_TERMINATED
    assert not (run_dir / LOCK).exists()  # released on the way out


def test_a_lock_left_by_a_dead_process_is_taken_over(finished_run, tmp_path, compose, capsys):
    dead = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"], check=True,
                          capture_output=True, text=True).stdout.strip()
    run_dir = tmp_path / "run"
    run_dir.mkdir()
    left = {"pid": int(dead), "host": socket.gethostname(), "started": "2026-01-01T00:00:00"}
    (run_dir / LOCK).write_text(json.dumps(left))
    run(compose([*QUICK, "trainer.max_steps=40", "evaluation.episodes=10"]), run_dir=run_dir)
    assert f"was left by process {dead} on {socket.gethostname()}" in capsys.readouterr().err
    assert (run_dir / "eval.json").is_file() and not (run_dir / LOCK).exists()


def test_the_lock_is_released_on_errors_and_is_reentrant(tmp_path):
    with pytest.raises(ValueError), RunFolderLock(tmp_path):
        with RunFolderLock(tmp_path):  # the same process again: nested, not refused
            assert (tmp_path / LOCK).is_file()
        assert (tmp_path / LOCK).is_file()
        raise ValueError("a failing run")
    assert not (tmp_path / LOCK).exists()


def test_a_folder_locked_by_another_process_is_refused(tmp_path):
    holder = subprocess.Popen(
        [sys.executable, "-c", ("import sys; from rs_lightning.app.run_folders import RunFolderLock\n"
                                f"with RunFolderLock({str(tmp_path)!r}):\n"
                                "    print('held', flush=True); sys.stdin.read()")],
        stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True,
        env={**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)})
    try:
        assert holder.stdout.readline().strip() == "held"
        with (pytest.raises(FolderInUse, match=f"in use by process {holder.pid} "),
              RunFolderLock(tmp_path, "hydra.run.dir")):
            pass
    finally:
        holder.stdin.close()
        holder.wait(timeout=30)
    with RunFolderLock(tmp_path):  # free again once it ended
        pass


# ----------------------------------------------------------------------------- empty folders
@pytest.mark.parametrize("callback", ["kept", "removed"])
@pytest.mark.parametrize("key, flags", [("hydra.run.dir", []), ("hydra.sweep.dir", ["-m"])])
def test_an_empty_output_folder_is_refused(tmp_path, key, flags, callback):
    extra = [NO_CALLBACK] if callback == "removed" else []
    result = train_command(*flags, *QUICK, f"{key}=", "seed=1", *extra, cwd=tmp_path)
    assert result.returncode == EXIT_BAD_INPUT, result.stderr
    assert f"{key}: is empty" in result.stderr
    if callback == "kept" or key == "hydra.run.dir":
        assert error_line(result.stderr) and not list(tmp_path.iterdir())
    else:
        # Hydra's launcher writes multirun.yaml and makes the job's folder before the job
        # runs; the job writes nothing into it and stops the sweep.
        folders = [p for p in tmp_path.iterdir() if p.is_dir()]
        assert {p.name for p in tmp_path.iterdir() if p.is_file()} == {"multirun.yaml"}
        assert len(folders) == 1 and not list(folders[0].iterdir())


# ----------------------------------------------------------------------------- foreign folders
@pytest.mark.parametrize("callback", ["kept", "removed"])
def test_a_run_never_writes_into_a_folder_of_another_config(finished_run, tmp_path, callback):
    folder = tmp_path / "run"
    shutil.copytree(finished_run, folder)
    before = snapshot(folder)
    extra = [NO_CALLBACK] if callback == "removed" else []
    result = train_command(*QUICK, "seed=5", f"hydra.run.dir={folder}", *extra)
    assert result.returncode == EXIT_BAD_INPUT
    assert "holds a run of another config (seed: 0 there, 5 now)" in error_line(result.stderr)
    assert snapshot(folder) == before  # no .hydra/, no failed.json, no log


@pytest.mark.parametrize("callback", ["kept", "removed"])
def test_a_sweep_job_never_writes_into_a_folder_of_another_config(finished_run, tmp_path, callback):
    sweep = tmp_path / "sweep"
    job = sweep / "job0"  # the folder the sweep's first job uses (hydra.sweep.subdir below)
    shutil.copytree(finished_run, job)
    before = snapshot(job)
    extra = [NO_CALLBACK] if callback == "removed" else []
    result = train_command("-m", *QUICK, "seed=1,2", f"hydra.sweep.dir={sweep}",
                           "hydra.sweep.subdir=job${hydra.job.num}", *extra)
    assert result.returncode == EXIT_BAD_INPUT, result.stderr
    assert "holds a run of another config (seed: 0 there, 1 now)" in result.stderr
    assert snapshot(job) == before
    assert not (sweep / "job1").exists()  # the sweep stopped there


def test_bad_input_is_refused_by_the_job_without_the_callback(finished_run, tmp_path):
    folder = tmp_path / "run"
    shutil.copytree(finished_run, folder)
    before = snapshot(folder)
    result = train_command(*QUICK, "alpha=1.5", f"hydra.run.dir={folder}", NO_CALLBACK)
    assert result.returncode == EXIT_BAD_INPUT
    assert "alpha: must be in [0, 1], got 1.5" in error_line(result.stderr)
    assert snapshot(folder) == before


# ------------------------------------------------------------------ folders stay in outputs/
def test_a_value_with_slashes_names_one_folder_inside_outputs(compose):
    """An override value holding '/' or '..' names one folder (its slashes as %2F), for a
    run and for a sweep's job alike."""
    from hydra import compose as hydra_compose
    from hydra import initialize_config_dir

    from rs_lightning.app.run_names import folder_label

    assert folder_label("+env.kwargs.render_mode=x/../../tmp/ESC") == (
        "+env.kwargs.render_mode=x%2F..%2F..%2Ftmp%2FESC")
    with initialize_config_dir(config_dir=str(ROOT / "conf"), version_base="1.3"):
        cfg = hydra_compose("train", ["debug=quick", "+env.kwargs.render_mode=x/../../tmp/ESC"],
                            return_hydra_config=True)
    cfg.hydra.job.num = 0
    run_dir = cfg.hydra.run.dir.split("outputs/runs/", 1)[1]
    assert "/" not in run_dir and "/" not in cfg.hydra.sweep.subdir


@pytest.mark.parametrize("subdir", ["/ABS", "../escaped", "a/../../b"])
def test_a_sweep_subdir_outside_the_sweep_is_refused_before_any_job(tmp_path, subdir):
    sweep = tmp_path / "sweep"
    subdir = subdir.replace("/ABS", str(tmp_path / "elsewhere"))
    result = train_command("-m", *QUICK, "seed=1,2", f"hydra.sweep.dir={sweep}",
                           f"hydra.sweep.subdir={subdir}", cwd=tmp_path)
    assert result.returncode == EXIT_BAD_INPUT, result.stderr
    line = error_line(result.stderr)
    assert "hydra.sweep.subdir: must name a folder inside hydra.sweep.dir" in line
    assert sorted(p.name for p in tmp_path.iterdir()) == []


@pytest.mark.parametrize("overrides, suffix", [
    (["experiment=cartpole"], "_experiment=cartpole"),  # the preset names the run
    (["experiment=cartpole", "agent=c51"], "_agent=c51,experiment=cartpole"),
    ([], ""),  # no name ends in "_"
    (["ckpt_path=/elsewhere/step0000100.ckpt"], "_resumed-step0000100"),  # not "__resumed-"
])
def test_folder_names_show_the_experiment_and_never_end_in_an_underscore(overrides, suffix):
    from hydra import compose as hydra_compose
    from hydra import initialize_config_dir

    with initialize_config_dir(config_dir=str(ROOT / "conf"), version_base="1.3"):
        cfg = hydra_compose("train", overrides, return_hydra_config=True)
    cfg.hydra.job.num = 0
    run_name = cfg.hydra.run.dir.split("outputs/runs/", 1)[1]
    assert run_name[len("2026-11-27_08-00-00"):] == suffix
    assert cfg.hydra.sweep.subdir == f"0{suffix}"
    # The W&B name is the same label (without the seed), so it shows the experiment too.
    from rs_lightning.app.run_names import overrides_label, wandb_run_names

    exclude = {*cfg.hydra.job.config.override_dirname.exclude_keys, "seed"}
    setting = overrides_label([*overrides, "seed=3"], exclude) or None
    name, _ = wandb_run_names("c51", "CartPole-v1", 3, None, setting, None)
    if "experiment=cartpole" in suffix:
        assert name.startswith(suffix[1:]) and name.endswith(",seed=3")


def test_a_group_the_experiment_sets_replaced_on_the_command_line_is_said(capsys):
    from rs_lightning.app.cli import check_group_files

    check_group_files(["experiment=cartpole", "env=gym", "env.id=CartPole-v1"], ROOT / "conf")
    (line,) = capsys.readouterr().err.strip().splitlines()
    assert line.startswith("warning: env=gym replaces the env=cartpole of experiment=cartpole")
    check_group_files(["experiment=cartpole", "env=cartpole"], ROOT / "conf")
    check_group_files(["experiment=cartpole"], ROOT / "conf")
    assert capsys.readouterr().err == ""
