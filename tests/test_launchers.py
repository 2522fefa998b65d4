"""Scaling out: a multirun through each cluster launcher, end to end, every job's results kept.

- submitit's local executor (hydra/launcher=submitit_local): the code path of the SLURM
  launcher without SLURM; the SLURM presets are checked down to the sbatch file they submit.
- a local Ray instance (hydra/launcher=ray): slow (Ray starts a dozen processes), `-m slow`.

The launchers come with the `test` (submitit) and `cluster` (submitit, Ray) extras; without
them these tests fail and say what to install. Nothing here uses the network: Ray runs in its
single-machine mode, on the loopback interface.
"""

from __future__ import annotations

import importlib.util
import json
import os
import subprocess
from pathlib import Path

import pytest

from tests.conftest import ROOT
from tests.warm_python import command as python_command

SEEDS = (0, 1)
STEPS = 100
QUICK_MULTIRUN = (
    "-m", f"seed={','.join(map(str, SEEDS))}", "agent=dqn", "debug=quick", "logger=none",
    "callbacks.progress_bar=false", f"trainer.max_steps={STEPS}", "evaluation.every_n_steps=0",
    "evaluation.episodes=100",
)


def require(module: str, extra: str) -> None:
    if importlib.util.find_spec(module) is None:
        pytest.fail(f"{module} is not installed, so this launcher cannot be tested: "
                    f'pip install torch==2.13.0 -e ".[{extra}]"', pytrace=False)


def train_cli(*args: str, cwd: Path = ROOT, env: dict[str, str] | None = None,
              timeout: float = 300) -> subprocess.CompletedProcess:
    # Ray's single-machine mode: every Ray process listens on 127.0.0.1 only (otherwise Ray
    # uses this machine's network address), and no usage statistics.
    full_env = dict(os.environ, WANDB_MODE="offline", HYDRA_FULL_ERROR="0",
                    RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER="0", RAY_USAGE_STATS_ENABLED="0",
                    **(env or {}))
    return subprocess.run(
        [*python_command(), str(ROOT / "train.py"), *args], cwd=cwd, env=full_env,
        capture_output=True, text=True, timeout=timeout, stdin=subprocess.DEVNULL,
    )


def assert_every_job_kept(sweep_dir: Path) -> None:
    jobs = sorted(sweep_dir.glob("[0-9]*_*"))
    assert [job.name.split("_")[0] for job in jobs] == [str(num) for num in range(len(SEEDS))]
    for job, seed in zip(jobs, SEEDS):
        assert not (job / "failed.json").exists(), (job / "failed.json").read_text()
        summary = json.loads((job / "eval.json").read_text())
        assert (summary["seed"], summary["agent"], summary["steps"]) == (seed, "dqn", STEPS)
        assert json.loads((job / "policy.json").read_text())
        assert (job / "checkpoints" / "last.ckpt").is_file()
        assert (job / ".hydra" / "overrides.yaml").is_file()


@pytest.mark.slow
def test_submitit_local_runs_a_multirun_to_completion(tmp_path):
    require("hydra_plugins.hydra_submitit_launcher", "test")
    sweep_dir = tmp_path / "sweep"
    result = train_cli(*QUICK_MULTIRUN, "hydra/launcher=submitit_local",
                       f"hydra.sweep.dir={sweep_dir}")
    assert result.returncode == 0, result.stderr[-3000:]
    assert_every_job_kept(sweep_dir)
    # Each job ran in its own process, whose output submitit kept.
    assert len(list((sweep_dir / ".submitit").glob("*/*_log.err"))) == len(SEEDS)


@pytest.mark.slow
def test_ray_local_instance_runs_a_multirun_to_completion(tmp_path):
    require("ray", "cluster")
    # A relative sweep folder: the Ray workers, which may start in another folder, must write into the
    # folder the command line meant.
    result = train_cli(*QUICK_MULTIRUN, "hydra/launcher=ray", "hydra.launcher.ray.init.num_cpus=2",
                       "hydra.sweep.dir=sweep", cwd=tmp_path)
    assert result.returncode == 0, result.stderr[-3000:]
    assert_every_job_kept(tmp_path / "sweep")


FAKE_SBATCH = """#!/bin/sh
cp "$1" "$FAKE_SLURM_CAPTURE/submitted.sh"
echo "sbatch: error: no SLURM on this machine (test)" >&2
exit 1
"""


@pytest.mark.parametrize("preset, flags", [
    ("slurm_cpu", ["--cpus-per-task=2", "--mem=4GB", "--time=60", "--array=0-1%2",
                   "--signal=USR2@120", "--partition=short"]),
    ("slurm_gpu", ["--cpus-per-task=4", "--mem=16GB", "--gpus-per-node=1", "--partition=short"]),
])
def test_slurm_preset_submits_one_array_job_with_its_resources(tmp_path, preset, flags):
    """The presets through hydra-submitit-launcher down to the sbatch file, with a stand-in
    sbatch that keeps the file and refuses the job."""
    require("hydra_plugins.hydra_submitit_launcher", "test")
    bin_dir, capture = tmp_path / "bin", tmp_path / "capture"
    bin_dir.mkdir()
    capture.mkdir()
    (bin_dir / "sbatch").write_text(FAKE_SBATCH)
    (bin_dir / "srun").write_text("#!/bin/sh\nexit 1\n")  # submitit looks for it
    for tool in bin_dir.iterdir():
        tool.chmod(0o755)
    result = train_cli(
        *QUICK_MULTIRUN, f"hydra/launcher={preset}", "hydra.launcher.partition=short",
        f"hydra.sweep.dir={tmp_path / 'sweep'}",
        env={"PATH": f"{bin_dir}{os.pathsep}{os.environ['PATH']}",
             "FAKE_SLURM_CAPTURE": str(capture)},
    )
    assert "no SLURM on this machine" in result.stderr
    script = (capture / "submitted.sh").read_text()
    sbatch_lines = {line.removeprefix("#SBATCH ") for line in script.splitlines()
                    if line.startswith("#SBATCH ")}
    assert set(flags) <= sbatch_lines, script
    assert "submitit.core._submit" in script


def test_ray_launcher_passes_only_the_settings_given():
    from omegaconf import OmegaConf

    from hydra_plugins.rs_lightning_ray_launcher.ray_launcher import given

    cluster = OmegaConf.create({"address": "auto", "num_cpus": None, "include_dashboard": False})
    assert given(cluster) == {"address": "auto", "include_dashboard": False}
    assert given(None) == {}


FAKE_RAY = {
    "missing": "raise ImportError('no ray here')\n",
    "unreachable": (
        "def is_initialized():\n    return False\n"
        "def init(**kwargs):\n"
        "    raise ConnectionError(f'Failed to connect to Ray cluster at {kwargs[\"address\"]}')\n"
    ),
}


@pytest.mark.parametrize("ray, overrides, message", [
    ("missing", [],
     'hydra/launcher: ray is not installed; pip install torch==2.13.0 -e ".[cluster]"'),
    ("unreachable", ["hydra.launcher.ray.init.address=ray-head.invalid:6379"],
     "hydra.launcher.ray.init: Ray could not start or connect: Failed to connect to Ray "
     "cluster at ray-head.invalid:6379"),
])
def test_ray_launcher_problems_are_one_line(tmp_path, ray, overrides, message):
    # A stand-in `ray` package (nothing is started or contacted).
    (tmp_path / "ray").mkdir()
    (tmp_path / "ray" / "__init__.py").write_text(FAKE_RAY[ray])
    result = train_cli(
        *QUICK_MULTIRUN, "hydra/launcher=ray", *overrides, f"hydra.sweep.dir={tmp_path / 'sweep'}",
        env={"PYTHONPATH": os.pathsep.join(filter(None, [str(tmp_path),
                                                         os.environ.get("PYTHONPATH")]))},
    )
    assert result.returncode == 2
    assert f"Error in config: {message}" in result.stderr
    assert "Traceback" not in result.stderr
