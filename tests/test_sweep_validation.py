"""Every job of a sweep is checked before the sweep writes anything: one bad value of one job
is one line, exit 2 and no folder; the benchmark refuses flags and overrides that contradict
each other, sizes past their bound, a suite without a job and a run's folder as its own."""

from __future__ import annotations

import subprocess

import pytest

from rs_lightning.app.commands import benchmark as command
from rs_lightning.config.schema import MAX_PARALLEL_SEEDS
from tests.conftest import ROOT
from tests.warm_python import command as python_command

QUICK = ["debug=quick", "logger=none", "callbacks.progress_bar=false"]


def train(*args: str, cwd) -> subprocess.CompletedProcess:
    return subprocess.run([*python_command(), str(ROOT / "train.py"), *args], cwd=cwd,
                          capture_output=True, text=True, timeout=300, stdin=subprocess.DEVNULL)


def everything_under(folder) -> list[str]:
    return sorted(str(p.relative_to(folder)) for p in folder.rglob("*"))


@pytest.mark.parametrize("sweep, line", [
    (["seed=0,1", "learning.lr=-1"],  # every job
     "learning.lr: must be positive, got -1.0 (job #0 of 2: seed=0); no job ran"),
    (["alpha=0.3,1.7"],  # the second job alone
     "alpha: must be in [0, 1], got 1.7 (job #1 of 2: alpha=1.7); no job ran"),
    (["agent=dqn,c51", "risk=cvar,nonexistent"],  # a group option the last jobs choose
     "risk: no option 'nonexistent'; allowed: "),
], ids=["every job", "second job", "group option"])
def test_a_sweep_with_one_bad_job_writes_nothing(tmp_path, sweep, line):
    """The dated sweep folder (outputs/multirun/<date>) is never made, no job folder."""
    result = train("-m", *QUICK, *sweep, cwd=tmp_path)
    assert result.returncode == 2, result.stderr[-3000:]
    assert result.stderr.strip().startswith(f"Error in config: {line}"), result.stderr[-3000:]
    assert len(result.stderr.strip().splitlines()) == 1, result.stderr
    assert everything_under(tmp_path) == []


def test_a_sweep_into_a_runs_folder_is_refused(tmp_path):
    run = tmp_path / "run"
    (run / "checkpoints").mkdir(parents=True)
    (run / "config.yaml").write_text("seed: 0\n")
    before = everything_under(tmp_path)
    result = train("-m", *QUICK, "seed=0,1", f"hydra.sweep.dir={run}", cwd=tmp_path)
    assert result.returncode == 2
    assert result.stderr.strip() == (
        f"Error in config: hydra.sweep.dir: {run} is the folder of a run (it holds "
        "config.yaml); a sweep writes a folder per job into a folder of its own: give a new "
        "folder, or the sweep's")
    assert everything_under(tmp_path) == before


def test_a_grid_sweep_left_without_a_job_is_refused(tmp_path):
    """The benchmark's sweeper leaves out the pairs the config refuses; when that is every
    job, the sweep says so in one line instead of ending at once with status 0."""
    result = train("-m", *QUICK, "experiment=benchmark_small", "env=two_stage", "agent=dqn",
                   "objective=static", "risk=cvar", "hydra.sweep.dir=sweep", cwd=tmp_path)
    assert result.returncode == 2
    assert result.stderr.strip() == (
        "Error in config: hydra.sweeper.params: the sweep has no job left ([rs_lightning] "
        "sweep: left out 1 job(s) of agent=dqn objective=static: static needs a "
        "distributional agent; agent=dqn learns a point value (allowed: per_decision))")
    assert everything_under(tmp_path) == []


# ----------------------------------------------------------------------------- the benchmark
@pytest.mark.parametrize("argv, line", [
    (["--seeds", "2", "parallel_seeds=3"], "parallel_seeds=3: the benchmark sets parallel_seeds "
     "by --seeds, whose value (given or the preset's) this override would contradict; write "
     "--seeds 3"),
    (["--agents", "c51", "agent=iqn"], "agent=iqn: the benchmark sets agent by --agents"),
    (["risk=var"], "risk=var: the benchmark sets risk by --measures"),  # no flag given
    (["hydra.sweep.dir=x"], "hydra.sweep.dir=x: the benchmark sets hydra.sweep.dir by --out"),
    (["--seeds", "1000"], f"--seeds: 1000; allowed: a whole number from 1 to "
     f"{MAX_PARALLEL_SEEDS} (the bound of parallel_seeds)"),
    (["--agents", "dqn", "--objectives", "static"], "--objectives: no job is left with these "
     "--agents: static needs a distributional agent; agent=dqn learns a point value"),
], ids=["seeds", "agents", "measures", "out", "bound", "no job"])
def test_the_benchmark_refuses_contradictions_and_bounds_before_anything(
        tmp_path, monkeypatch, capsys, argv, line):
    monkeypatch.chdir(tmp_path)
    assert command.main([*argv, "--wandb", "off"]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and err.startswith(f"error: {line}"), err
    assert everything_under(tmp_path) == []


def test_the_benchmark_refuses_a_runs_folder_as_its_sweep(tmp_path, monkeypatch, capsys):
    (tmp_path / "run" / ".hydra").mkdir(parents=True)
    monkeypatch.chdir(tmp_path)
    assert command.main(["--out", "run", "--wandb", "off"]) == 2
    assert capsys.readouterr().err.strip() == (
        "error: --out: run is the folder of a run (it holds .hydra); a sweep writes a folder "
        "per job into a folder of its own: give a new folder, or the sweep's")
    assert everything_under(tmp_path) == ["run", "run/.hydra"]


def test_a_bad_override_through_the_benchmark_writes_nothing(tmp_path):
    """The flags are right, an override is not: the sweep refuses it before any folder."""
    result = subprocess.run(
        [*python_command(), "-m", "rs_lightning", "benchmark", "--worlds", "two_stage",
         "--agents", "c51", "--measures", "cvar,var", "--objectives", "per_decision",
         "--seeds", "1", "--wandb", "off", "--out", "sweep", "learning.lr=-1"],
        cwd=tmp_path, capture_output=True, text=True, timeout=300, stdin=subprocess.DEVNULL)
    assert result.returncode == 2
    assert result.stderr.strip().splitlines()[-1] == (
        "Error in config: learning.lr: must be positive, got -1.0 (job #0 of 2: risk=cvar); "
        "no job ran")
    assert everything_under(tmp_path) == []
