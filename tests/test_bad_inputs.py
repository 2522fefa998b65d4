"""Bad input, one table: each case gets one line naming the key or file and what is allowed,
exit status 2, no traceback, and nothing written over an existing run.

Every case is checked in-process (the same checks the command line runs, on the composed
config, against a finished run's folder); the cases marked ``cli`` also run through the real
``python train.py`` with that finished run's folder as ``hydra.run.dir``.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path

import pytest
import torch

from rs_lightning.cli import check_overrides, describe_hydra_error
from rs_lightning.errors import ConfigError
from rs_lightning.jobs import skip_resume_or_run
from rs_lightning.train import run
from tests.conftest import ROOT

# The finished run the cases are aimed at: a short DQN run on risky rewards.
FINISHED_RUN = [
    "agent=dqn", "logger=none", "callbacks.progress_bar=false", "trainer.max_steps=20",
    "trainer.checkpoint_every_n_steps=0", "learning.warmup_steps=8", "evaluation.episodes=10",
    "evaluation.every_n_steps=0",
]


@dataclass
class Case:
    id: str
    overrides: list[str]
    key: str  # the message starts with it
    allowed: str  # and says this (what is allowed, or what is wrong with the file)
    cli: bool = False  # also through the real command line
    gpu_dependent: bool = False  # valid on a machine with a GPU
    extra: list[str] = field(default_factory=list)  # overrides put before the case's own


CASES = [
    # values out of range or of the wrong type (schema)
    Case("alpha above 1", ["alpha=1.5"], "alpha", "must be in [0, 1], got 1.5", cli=True),
    Case("alpha below 0", ["alpha=-0.1"], "alpha", "must be in [0, 1]"),
    Case("alpha not a number", ["alpha=abc"], "alpha", "must be a number, got 'abc'"),
    Case("alpha empty", ["alpha="], "alpha", "must be a number, got ''"),
    Case("rho 0", ["rho=0"], "rho", "must be in (0, 1), excluding both ends"),
    Case("rho 1", ["rho=1"], "rho", "must be in (0, 1), excluding both ends"),
    Case("negative seed", ["seed=-1"], "seed", "a non-negative integer"),
    Case("negative batch size", ["learning.batch_size=-4"], "learning.batch_size",
         "must be a positive integer, got -4"),
    Case("zero batch size", ["learning.batch_size=0"], "learning.batch_size",
         "must be a positive integer, got 0", cli=True),
    Case("return grid min = max", ["env.return_min=2"], "env.return_min",
         "must be below env.return_max=2.0"),
    Case("return grid min > max", ["env.return_min=3"], "env.return_min",
         "must be below env.return_max=2.0"),
    Case("return grid of one point", ["agent=rs_umdqn_c", "agent.n_returns=1"],
         "agent.n_returns", "must be an integer >= 2"),
    Case("gamma 1", ["env.gamma=1.0"], "env.gamma", "must be in [0, 1)"),
    Case("zero max_steps", ["trainer.max_steps=0"], "trainer.max_steps", "a positive integer"),
    Case("zero evaluation episodes", ["evaluation.episodes=0"], "evaluation.episodes",
         "a positive integer"),
    Case("unknown non-finite action", ["learning.on_non_finite=ignore"],
         "learning.on_non_finite", "one of stop, skip"),
    Case("bool not a bool", ["callbacks.progress_bar=maybe"], "callbacks.progress_bar",
         "must be true or false"),
    Case("unknown agent name", ["agent.name=nope"], "agent", "unknown agent 'nope'; allowed:"),
    # risk conditioning (agent.risk_conditioned=true)
    Case("risk-conditioned DQN", ["agent=dqn", "agent.risk_conditioned=true"],
         "agent.risk_conditioned", "DQN learns no distribution", cli=True),
    Case("conditioning alpha above 1", ["agent=c51", "agent.risk_conditioned=true",
                                        "risk_conditioning.alpha=[0,1.5]"],
         "risk_conditioning.alpha", "every value must be in [0, 1], got [0, 1.5]"),
    Case("conditioning alpha below 0", ["agent=c51", "agent.risk_conditioned=true",
                                        "risk_conditioning.alpha=[-0.2,1]"],
         "risk_conditioning.alpha", "every value must be in [0, 1]"),
    Case("conditioning rho 0", ["agent=c51", "agent.risk_conditioned=true",
                                "risk_conditioning.rho=[0,0.5]"],
         "risk_conditioning.rho", "every value must be in (0, 1]"),
    Case("conditioning rho above 1", ["agent=c51", "agent.risk_conditioned=true",
                                      "risk_conditioning.rho=[0.1,1.5]"],
         "risk_conditioning.rho", "every value must be in (0, 1]"),
    Case("conditioning range of three values", ["agent=c51", "agent.risk_conditioned=true",
                                                "risk_conditioning.alpha=[0,0.5,1]"],
         "risk_conditioning.alpha", "must be [low, high] for draw=uniform"),
    Case("conditioning on a measure without a parameter", [
        "agent=c51", "agent.risk_conditioned=true", "risk=expectation"],
         "risk_conditioning", "risk=expectation declares no parameter"),
    Case("conditioning on a measure without a per-row parameter", [
        "agent=c51", "agent.risk_conditioned=true", "risk=cpw", "+risk_conditioning.eta=[0.5,1]"],
         "risk_conditioning", "risk=cpw takes no parameter per row"),
    Case("conditioning without the measure's range", ["agent=c51", "agent.risk_conditioned=true",
                                                       "risk=wang"],
         "risk_conditioning.eta", "the range of risk=wang's parameter is required"),
    Case("run's own rho outside the conditioning range", [
        "agent=c51", "agent.risk_conditioned=true", "rho=0.7"],
         "risk_conditioning", "rho=0.7 lies outside the range this run was trained on"),
    # config group options that do not exist
    Case("unknown agent option", ["agent=nope"], "agent", "no option 'nope'; allowed:", cli=True),
    Case("unknown risk option", ["risk=nope"], "risk", "no option 'nope'; allowed:"),
    Case("unknown env option", ["env=nope"], "env", "no option 'nope'; allowed:", cli=True),
    Case("unknown logger option", ["logger=nope"], "logger", "no option 'nope'; allowed:"),
    Case("GPU hardware without a GPU", ["hardware=gpu"], "hardware",
         "no CUDA device; use hardware=cpu", cli=True, gpu_dependent=True),
    Case("mixed-precision GPU without a GPU", ["hardware=gpu_mixed"], "hardware",
         "no CUDA device", gpu_dependent=True),
    # the environment
    Case("unregistered gymnasium id", ["env.id=Nope-v0"], "env.id",
         "'Nope-v0' is not a registered gymnasium id", cli=True),
    Case("argument the env does not take", ["+env.kwargs.nope=1"], "env.kwargs",
         "rejects these arguments"),
    Case("continuous actions", ["env=gym", "env.id=MountainCarContinuous-v0"], "env.id",
         "has action space Box(-1.0, 1.0, (1,), float32); supported: Discrete actions only",
         cli=True),
    Case("image observations", ["env=gym", "env.id=tests.gym_test_envs:TinyImage-v0"], "env.id",
         "(an image); supported: a 1-D Box (fed to the network as it is) or Discrete", cli=True),
    Case("gymnasium env without an id", ["env=gym"], "env.id", "a value is required"),
    # checkpoints
    Case("missing checkpoint", ["ckpt_path={tmp}/nothing.ckpt"], "ckpt_path",
         "no checkpoint file there"),
    Case("checkpoint path is a folder", ["ckpt_path={tmp}"], "ckpt_path", "a folder"),
    Case("checkpoint of garbage bytes", ["ckpt_path={tmp}/garbage.ckpt"], "ckpt_path",
         "is not a readable checkpoint (corrupt or truncated", cli=True),
    Case("truncated checkpoint", ["ckpt_path={tmp}/truncated.ckpt"], "ckpt_path",
         "is not a readable checkpoint (corrupt or truncated"),
    Case("empty checkpoint", ["ckpt_path={tmp}/empty.ckpt"], "ckpt_path",
         "is not a readable checkpoint"),
    Case("checkpoint of another agent", ["agent=rs_umdqn_c", "ckpt_path={dqn_ckpt}"],
         "ckpt_path", "was written by agent dqn, this run is agent=rs_umdqn_c", cli=True),
    Case("checkpoint of another network size", ["agent=dqn", "agent.hidden_sizes=[64,64]",
                                                "ckpt_path={dqn_ckpt}"],
         "ckpt_path", "does not fit this run's network"),
    Case("checkpoint of another environment", ["agent=dqn", "env=risky_grid_world",
                                               "ckpt_path={dqn_ckpt}"],
         "ckpt_path", "was written on env rs_lightning/RiskyRewards-v0"),
    # the command line itself
    Case("override without a key", ["=3"], "override '=3'", "has no key; write key=value",
         cli=True),
    Case("override with a double =", ["alpha==1"], "override 'alpha==1'",
         "is malformed (extraneous input '='); write key=value", cli=True),
    Case("override with an open bracket", ["alpha=[1"], "override 'alpha=[1'", "is malformed"),
    Case("override without a value", ["alpha"], "override 'alpha'", "is malformed"),
    Case("unknown key", ["nope=1"], "nope", "unknown key"),
    Case("unknown nested key", ["learning.nope=1"], "learning.nope", "unknown key"),
    Case("adding a key that exists", ["+alpha=0.3"], "alpha", "already exists"),
    # the output folder
    Case("output folder under a file", ["hydra.run.dir={tmp}/garbage.ckpt/run"],
         "hydra.run.dir", "is a file, not a folder", cli=True),
    Case("output folder holding a run of another config", ["alpha=0.3"], "hydra.run.dir",
         "holds a run of another config (alpha: 0.5 there, 0.3 now)", cli=True,
         extra=FINISHED_RUN),
]


@pytest.fixture(scope="module")
def files(tmp_path_factory):
    """A finished run's folder (the target of every case) and checkpoint files good and bad."""
    from hydra import compose, initialize_config_dir

    from tests.conftest import CONF

    tmp = tmp_path_factory.mktemp("bad_inputs")
    with initialize_config_dir(config_dir=str(CONF), version_base="1.3"):
        cfg = compose(config_name="train", overrides=FINISHED_RUN)
    finished = tmp / "finished_run"
    run(cfg, run_dir=finished)
    good = finished / "checkpoints" / "last.ckpt"
    (tmp / "garbage.ckpt").write_bytes(os.urandom(4096))
    (tmp / "truncated.ckpt").write_bytes(good.read_bytes()[: good.stat().st_size // 2])
    (tmp / "empty.ckpt").write_bytes(b"")
    return {"tmp": tmp, "finished": finished, "dqn_ckpt": good}


def overrides_of(case: Case, files) -> list[str]:
    fill = {"tmp": files["tmp"], "dqn_ckpt": files["dqn_ckpt"]}
    return case.extra + [o.format(**fill) for o in case.overrides]


def snapshot(folder: Path) -> dict[str, tuple[int, int, bytes]]:
    """Every file and folder below ``folder`` with its size, modification time and bytes."""
    return {
        str(p.relative_to(folder)): (
            (p.stat().st_size, p.stat().st_mtime_ns, p.read_bytes()) if p.is_file() else (0, 0, b"")
        )
        for p in sorted(folder.rglob("*"))
    }


def error_in_process(compose, overrides: list[str], run_dir: Path) -> ConfigError:
    """The error the command line would report, raised by the same checks in-process."""
    try:
        check_overrides(overrides)
        cfg = compose([o for o in overrides if not o.startswith("hydra.run.dir=")])
    except ConfigError as error:
        return error
    except Exception as error:  # Hydra's composition errors, as the command line words them
        return describe_hydra_error(error)
    for o in overrides:
        if o.startswith("hydra.run.dir="):
            run_dir = Path(o.split("=", 1)[1])
    with pytest.raises(ConfigError) as error:
        skip_resume_or_run(cfg, run_dir, "hydra.run.dir")  # the job train.py runs
    return error.value


def test_the_table_has_at_least_25_bad_inputs():
    assert len(CASES) >= 25
    assert len({c.id for c in CASES}) == len(CASES)
    assert sum(c.cli for c in CASES) >= 10


def skip_if_gpu(case: Case) -> None:
    if case.gpu_dependent and torch.cuda.is_available():
        pytest.skip("this machine has a GPU: the option is valid here")


@pytest.mark.parametrize("case", CASES, ids=[c.id for c in CASES])
def test_bad_input_is_one_clear_error_and_writes_nothing(compose, files, case):
    skip_if_gpu(case)
    before = snapshot(files["finished"])
    error = error_in_process(compose, overrides_of(case, files), files["finished"])
    message = str(error)
    assert error.key == case.key, message
    assert message.startswith(f"{case.key}: ") and "\n" not in message
    assert case.allowed in message
    assert snapshot(files["finished"]) == before


# ------------------------------------------------------------------ the real command line
CLI_CASES = [c for c in CASES if c.cli]


@pytest.fixture(scope="module")
def cli_results(files):
    """Every command line case, run side by side, each against its own copy of the finished
    run (so that a case writing into it is caught as that case)."""

    def one(case: Case):
        target = files["tmp"] / f"cli_{CASES.index(case)}"
        shutil.copytree(files["finished"], target)
        before = snapshot(target)
        args = overrides_of(case, files)
        if not any(o.startswith("hydra.run.dir=") for o in args):
            args.append(f"hydra.run.dir={target}")
        env = dict(os.environ, WANDB_MODE="offline")
        env.pop("HYDRA_FULL_ERROR", None)
        result = subprocess.run(
            [sys.executable, str(ROOT / "train.py"), *args], cwd=ROOT, env=env,
            capture_output=True, text=True, timeout=120, stdin=subprocess.DEVNULL,
        )
        return result, before == snapshot(target)

    with ThreadPoolExecutor(max_workers=3) as pool:
        return dict(zip((c.id for c in CLI_CASES), pool.map(one, CLI_CASES)))


@pytest.mark.parametrize("case", CLI_CASES, ids=[c.id for c in CLI_CASES])
def test_bad_input_on_the_command_line(cli_results, case):
    skip_if_gpu(case)
    result, untouched = cli_results[case.id]
    lines = [line for line in result.stderr.splitlines() if line.strip()]
    assert result.returncode == 2, result.stderr[-2000:]
    assert len(lines) == 1, result.stderr[-2000:]
    assert lines[0].startswith(f"Error in config: {case.key}: ")
    assert case.allowed in lines[0]
    assert "Traceback" not in result.stderr and result.stdout == ""
    assert untouched, "the command wrote into the existing run's folder"
