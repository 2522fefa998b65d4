"""Faults a run must survive or report clearly: kills mid-write, NaNs, an unreachable W&B."""

from __future__ import annotations

import errno
import json
import os
import random
import signal
import socket
import subprocess
import sys
import tempfile
import time

import pytest
import torch

from rs_lightning.analysis.wandb_support import wandb_online_problem
from rs_lightning.app.train import run
from rs_lightning.engine.build import AtomicCheckpointIO, build
from rs_lightning.errors import NumericalFault
from rs_lightning.files import append_jsonl, atomic_write, read_jsonl, truncate_jsonl
from tests.conftest import ROOT
from tests.warm_python import command as python_command


def train_cli(*args: str, env: dict | None = None) -> subprocess.CompletedProcess:
    return subprocess.run(
        [*python_command(), str(ROOT / "train.py"), *args], cwd=ROOT,
        env=env or dict(os.environ, WANDB_MODE="offline"), capture_output=True, text=True,
        timeout=300, stdin=subprocess.DEVNULL,  # nothing may wait for input
    )


QUICK_DQN = ["agent=dqn", "debug=quick", "callbacks.progress_bar=false", "evaluation.episodes=100"]


# ---------------------------------------------------------------- atomic files
def test_a_checkpoint_write_that_fails_midway_keeps_the_old_file(tmp_path, monkeypatch):
    path = tmp_path / "last.ckpt"
    AtomicCheckpointIO(gamma=0.9).save_checkpoint({"weights": torch.zeros(3)}, path)
    before = path.read_bytes()

    def dying_save(obj, f, *args, **kwargs):
        f.write(b"the first bytes of a checkpoint")
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(torch, "save", dying_save)
    with pytest.raises(OSError, match="No space left"):
        AtomicCheckpointIO(gamma=0.9).save_checkpoint({"weights": torch.ones(3)}, path)
    assert path.read_bytes() == before
    assert [p.name for p in tmp_path.iterdir()] == ["last.ckpt"]  # no temporary file left


WRITER = """
import sys, torch
from rs_lightning.files import atomic_write
step = 0
while True:
    step += 1
    with atomic_write(sys.argv[1], "wb") as f:
        torch.save({"step": step, "weights": torch.full((2_000_000,), float(step))}, f)
"""


def test_a_kill_while_writing_never_leaves_a_truncated_file(tmp_path):
    """A process rewriting an 8 MB checkpoint in a loop is killed at random moments; the file
    is always a complete checkpoint (a plain write leaves a truncated one at most kills)."""
    path = tmp_path / "last.ckpt"
    for _ in range(3):
        writer = subprocess.Popen([sys.executable, "-c", WRITER, str(path)],
                                  stdin=subprocess.DEVNULL)
        deadline = time.monotonic() + 60
        while not path.exists() and time.monotonic() < deadline:
            time.sleep(0.01)
        time.sleep(random.uniform(0.05, 0.5))
        writer.send_signal(signal.SIGKILL)
        writer.wait()
        state = torch.load(path, weights_only=True)
        assert state["weights"].shape == (2_000_000,)
        assert bool((state["weights"] == float(state["step"])).all())


def test_a_line_cut_short_by_a_kill_is_dropped(tmp_path, capsys):
    history = tmp_path / "eval_history.jsonl"
    history.write_text('{"step": 150, "utility": 0.1}\n{"step": 300, "utility": 0.2}\n{"step": 45')
    assert [r["step"] for r in read_jsonl(history)] == [150, 300]
    assert "last line" in capsys.readouterr().err
    truncate_jsonl(history, lambda r: r["step"] <= 150)  # what a resume from step 150 keeps
    assert history.read_text() == '{"step": 150, "utility": 0.1}\n'


@pytest.mark.parametrize("damage", [b'{"start_step": 0, "pid"', b"\xff\xfe\x00binary"])
def test_a_record_never_joins_a_line_cut_by_a_kill(compose, tmp_path, capsys, damage):
    """append_jsonl ends a cut last line before its record (the record stays readable), and
    a run drops the damaged record of its attempts.jsonl as eval_history.jsonl's."""
    path = tmp_path / "attempts.jsonl"
    path.write_bytes(b'{"start_step": 0}\n' + damage)
    append_jsonl(path, {"start_step": 100})
    assert read_jsonl(path) == [{"start_step": 0}, {"start_step": 100}]
    assert "skipping an unreadable line 2" in capsys.readouterr().err

    run_dir = tmp_path / "run"
    run_dir.mkdir()
    (run_dir / "attempts.jsonl").write_bytes(damage)
    run(compose(["debug=quick", "logger=none", "callbacks.progress_bar=false",
                 "trainer.max_steps=20", "evaluation.every_n_steps=0",
                 "evaluation.episodes=20"]), run_dir=run_dir)
    lines = (run_dir / "attempts.jsonl").read_text().splitlines()
    assert len(lines) == 1 and json.loads(lines[0])["start_step"] == 0


def test_atomic_write_gives_files_the_usual_permissions(tmp_path):
    with atomic_write(tmp_path / "a.json") as f:
        f.write("{}")
    plain = tmp_path / "b.json"
    plain.write_text("{}")
    assert (tmp_path / "a.json").stat().st_mode == plain.stat().st_mode


# ---------------------------------------------------------------- numerical faults
def test_a_nan_loss_stops_the_run_keeps_the_good_checkpoint_and_marks_wandb_failed(tmp_path):
    run_dir = tmp_path / "run"
    result = train_cli(*QUICK_DQN, "logger=wandb", "fault_injection.nan_loss_at_step=130",
                       f"hydra.run.dir={run_dir}")
    assert result.returncode == 3, result.stderr[-3000:]
    lines = [line for line in result.stderr.splitlines() if line.startswith("Error")]
    assert lines == [lines[0]] and lines[0].startswith(
        "Error in training: non-finite loss (nan) at step 130; the run stopped and its last "
        f"good checkpoint is {run_dir / 'checkpoints' / 'last.ckpt'} (step 100)."
    )
    assert "Traceback" not in result.stderr
    state = torch.load(run_dir / "checkpoints" / "last.ckpt", weights_only=True)
    assert state["global_step"] == 100
    assert all(torch.isfinite(t).all() for t in state["state_dict"].values())
    assert not (run_dir / "eval.json").exists()
    # W&B records the run's exit code in its log: 1 marks the run failed.
    (wandb_run,) = (run_dir / "wandb").glob("offline-run-*")
    assert "got exitcode: 1" in (wandb_run / "logs" / "debug.log").read_text()


def test_skip_drops_the_bad_update_and_counts_it(compose, tmp_path):
    cfg = compose([*QUICK_DQN, "logger=csv", "learning.on_non_finite=skip",
                   "fault_injection.nan_loss_at_step=130"])
    summary = run(cfg, run_dir=tmp_path)
    assert summary["steps"] == 300 and summary["expectation"] == summary["expectation"]
    state = torch.load(tmp_path / "checkpoints" / "last.ckpt", weights_only=True)
    assert state["rs_lightning"]["skipped_updates"] == 1
    # Adam made 299 steps in 300 updates: the NaN update changed no parameter and no moment.
    assert all(s["step"] == 299 for s in state["optimizer_states"][0]["state"].values())
    metrics = (tmp_path / "csv" / "metrics.csv").read_text()
    assert "train/skipped_updates" in metrics.splitlines()[0]


@pytest.mark.parametrize("agent", ["dqn", "iqn"])  # stacked and looped members
def test_fault_injection_reaches_every_member(compose, tmp_path, agent):
    """One engine for every K: a NaN loss at update 130 of a two-seed run stops it, naming
    the seeds, and a skip leaves both members' Adam one step behind."""
    overrides = [*QUICK_DQN, f"agent={agent}", "parallel_seeds=2", "logger=none",
                 "trainer.max_steps=150", "fault_injection.nan_loss_at_step=130"]
    with pytest.raises(NumericalFault) as fault:
        run(compose(overrides), run_dir=tmp_path / "stop")
    assert fault.value.step == 130 and str(fault.value).startswith("non-finite loss of seed 0, 1")
    summary = run(compose([*overrides, "learning.on_non_finite=skip"]), run_dir=tmp_path / "skip")
    assert sorted(summary["members"]) == ["0", "1"]
    for seed in (0, 1):
        state = torch.load(tmp_path / "skip" / f"seed_{seed}" / "checkpoints" / "last.ckpt",
                           weights_only=True)
        assert all(s["step"] == 149 for s in state["optimizer_states"][0]["state"].values())


def test_nan_parameters_stop_the_run_even_when_skipping(compose, tmp_path):
    cfg = compose([*QUICK_DQN, "logger=none", "learning.on_non_finite=skip",
                   "fault_injection.nan_parameters_at_step=130"])
    with pytest.raises(NumericalFault) as fault:
        run(cfg, run_dir=tmp_path)
    assert (fault.value.quantity, fault.value.step) == ("parameters", 130)
    assert str(fault.value) == "non-finite parameters at step 130"
    state = torch.load(tmp_path / "checkpoints" / "last.ckpt", weights_only=True)
    assert state["global_step"] == 100


def test_a_checkpoint_of_nan_weights_is_refused_before_writing(compose):
    from rs_lightning.config.schema import validate

    _, module = build(validate(compose(QUICK_DQN)))
    with torch.no_grad():
        next(module.members.parameters())[0] = float("inf")
    with pytest.raises(NumericalFault, match="non-finite parameters at step 7"):
        module.on_save_checkpoint({"global_step": 7})


# ---------------------------------------------------------------- logging faults
def closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_unreachable_wandb_server_falls_back_to_offline_and_completes(tmp_path):
    run_dir = tmp_path / "run"
    env = {k: v for k, v in os.environ.items() if not k.startswith("WANDB_")}
    env.update(WANDB_BASE_URL=f"http://127.0.0.1:{closed_port()}", WANDB_API_KEY="0" * 40,
               WANDB_SILENT="true")
    started = time.monotonic()
    result = train_cli(*QUICK_DQN, "trainer.max_steps=60", "evaluation.every_n_steps=0",
                       "logger=wandb", "logger.offline=false", "logger.online_timeout=5",
                       f"hydra.run.dir={run_dir}", env=env)
    assert result.returncode == 0, result.stderr[-3000:]
    assert "W&B online logging is not possible (cannot reach http://127.0.0.1:" in result.stderr
    assert list((run_dir / "wandb").glob("offline-run-*"))
    assert json.loads((run_dir / "eval.json").read_text())["steps"] == 60
    assert time.monotonic() - started < 120


def test_no_wandb_credentials_means_offline_without_a_prompt(monkeypatch, tmp_path):
    for key in ("WANDB_API_KEY", "WANDB_IDENTITY_TOKEN_FILE"):
        monkeypatch.delenv(key, raising=False)
    monkeypatch.setenv("NETRC", str(tmp_path / "no_netrc"))
    assert "no W&B credentials" in wandb_online_problem(timeout=1.0)


# ---------------------------------------------------------------- faults in every phase
# A short run with a checkpoint at updates 100 and 200 and one periodic evaluation; the
# same command (rs_lightning.app.jobs.run_job, in-process: the run folder is the working
# directory outside Hydra) after each fault must end with the uninterrupted run's eval.json.
PHASED = ["agent=dqn", "debug=quick", "logger=none", "callbacks.progress_bar=false",
          "trainer.max_steps=200", "evaluation.every_n_steps=100",
          "evaluation.episodes_during_training=20", "evaluation.episodes=100"]


def run_job_here(compose, overrides, folder, monkeypatch) -> int:
    """The job ``python train.py <overrides> hydra.run.dir=<folder>`` runs; its exit status."""
    from rs_lightning.app.jobs import run_job

    folder.mkdir(parents=True, exist_ok=True)
    monkeypatch.chdir(folder)
    try:
        run_job(compose(overrides))
    except SystemExit as stop:
        return stop.code
    return 0


def eval_files(folder, members: int) -> dict[str, bytes]:
    names = ["eval.json"] if members == 1 else [f"seed_{s}/eval.json" for s in range(members)]
    return {name: (folder / name).read_bytes() for name in names}


def histories(folder, members: int) -> dict[str, list[dict]]:
    """Each member's eval_history.jsonl without its wall times (``train_seconds``)."""
    names = (["eval_history.jsonl"] if members == 1
             else [f"seed_{s}/eval_history.jsonl" for s in range(members)])
    return {name: [{k: v for k, v in record.items() if k != "train_seconds"}
                   for record in read_jsonl(folder / name)] for name in names}


@pytest.fixture(scope="module")
def uninterrupted(tmp_path_factory):
    """The eval.json files of the uninterrupted runs, for one seed and for two."""
    from hydra import compose as hydra_compose
    from hydra import initialize_config_dir

    from tests.conftest import CONF

    results = {}
    for members in (1, 2):
        folder = tmp_path_factory.mktemp(f"uninterrupted_{members}")
        with initialize_config_dir(config_dir=str(CONF), version_base="1.3"):
            cfg = hydra_compose("train", [*PHASED, f"parallel_seeds={members}"])
        run(cfg, run_dir=folder)
        results[members] = eval_files(folder, members)
        results[f"history {members}"] = histories(folder, members)
    return results


def failing_writes(monkeypatch, name: str, error_number: int, after: int = 0) -> None:
    """Atomic writes of files called ``name`` fail with ``error_number`` from the
    (after + 1)-th on, as on a disk that fills up or a folder made read-only mid-run."""
    real = tempfile.mkstemp
    seen = []

    def mkstemp(*args, prefix=None, **kwargs):
        if prefix == f".{name}.":
            seen.append(name)
            if len(seen) > after:
                raise OSError(error_number, os.strerror(error_number))
        return real(*args, prefix=prefix, **kwargs)

    monkeypatch.setattr(tempfile, "mkstemp", mkstemp)


def fault_lines(capsys) -> list[str]:
    err = capsys.readouterr().err
    assert "Traceback" not in err, err[-3000:]
    return [line for line in err.splitlines() if line.startswith(("Error", "Stopped"))]


WRITE_FAULTS = [
    # (phase, the file whose write fails, writes of it that succeed first, errno, members,
    #  the last good checkpoint's step)
    ("training", "step0000200.ckpt", 0, errno.ENOSPC, 1, 100),
    ("training", "step0000200.ckpt", 0, errno.ENOSPC, 2, 100),
    ("training", "last.ckpt", 1, errno.EACCES, 1, 200),  # after step0000200.ckpt
    ("final evaluation", "eval.json", 0, errno.ENOSPC, 1, 200),
    ("final evaluation", "eval.json", 1, errno.ENOSPC, 2, 200),
    ("writing outputs", "members.json", 0, errno.EDQUOT, 2, 200),
    ("writing outputs", "policy.json", 0, errno.EROFS, 1, 200),
]


@pytest.mark.parametrize("phase, name, after, error_number, members, good", WRITE_FAULTS,
                         ids=[f"{f[0]}-{f[1]}-{errno.errorcode[f[3]]}-K{f[4]}" for f in WRITE_FAULTS])
def test_a_failed_write_is_one_line_and_the_same_command_resumes(
        compose, tmp_path, monkeypatch, capsys, uninterrupted, phase, name, after, error_number,
        members, good):
    overrides = [*PHASED, f"parallel_seeds={members}"]
    if name == "policy.json":
        overrides.append("env=risky_grid_world")  # a grid world writes policy.json
    with monkeypatch.context() as patch:
        failing_writes(patch, name, error_number, after)
        status = run_job_here(compose, overrides, tmp_path, monkeypatch)
    assert status == 4
    (line,) = fault_lines(capsys)
    assert line.startswith(f"Error writing the run: {os.strerror(error_number)}: ")
    assert f"{name}; the run stopped and its last good checkpoint is " in line
    assert f"last.ckpt (step {good})" in line or f"step{good:07d}.ckpt (step {good})" in line
    assert "then run the same command: it resumes from there" in line
    assert not list(tmp_path.rglob(".*.tmp")), "a temporary file was left behind"
    if name == "policy.json":
        return  # another environment than the uninterrupted runs
    assert run_job_here(compose, overrides, tmp_path, monkeypatch) == 0
    assert eval_files(tmp_path, members) == uninterrupted[members]


SIGTERM_PHASES = [
    # (phase, the function during which SIGTERM arrives, members)
    ("training", "rs_lightning.analysis.periodic_evaluation.evaluate_policy", 1),
    ("training", "rs_lightning.analysis.periodic_evaluation.evaluate_policy", 2),
    ("final evaluation", "rs_lightning.analysis.run_outputs.evaluate_run", 1),
    ("final evaluation", "rs_lightning.analysis.run_outputs.evaluate_run", 2),
    ("writing outputs", "rs_lightning.analysis.evaluation.write_json_atomic", 1),
    ("writing outputs", "rs_lightning.app.train.write_json_atomic", 2),
]


@pytest.mark.parametrize("name, status", [("SIGTERM", 143), ("SIGINT", 130)])
@pytest.mark.parametrize("phase, target, members", SIGTERM_PHASES,
                         ids=[f"{p[0]}-K{p[2]}" for p in SIGTERM_PHASES])
def test_a_stop_signal_in_any_phase_is_one_line_and_the_same_command_resumes(
        compose, tmp_path, monkeypatch, capsys, uninterrupted, phase, target, members, name,
        status):
    """SIGTERM (a scheduler) and SIGINT (Ctrl-C) alike: one line naming the signal and the
    checkpoint, 128 + the signal as the status, and the same command resumes."""
    module_name, _, function = target.rpartition(".")
    module = __import__(module_name, fromlist=[function])
    real = getattr(module, function)

    def signalled(*args, **kwargs):
        os.kill(os.getpid(), getattr(signal, name))  # delivered before the next bytecode
        return real(*args, **kwargs)

    overrides = [*PHASED, f"parallel_seeds={members}"]
    handlers = [signal.getsignal(signal.SIGTERM), signal.getsignal(signal.SIGINT)]
    with monkeypatch.context() as patch:
        patch.setattr(module, function, signalled)
        stopped = run_job_here(compose, overrides, tmp_path, monkeypatch)
    assert stopped == status
    (line,) = fault_lines(capsys)
    assert line.startswith(f"Stopped by {name}: the run's state is in ")
    assert "last.ckpt (update " in line and line.endswith("the same command resumes it")
    # The run restored both handlers.
    assert [signal.getsignal(signal.SIGTERM), signal.getsignal(signal.SIGINT)] == handlers
    assert run_job_here(compose, overrides, tmp_path, monkeypatch) == 0
    assert eval_files(tmp_path, members) == uninterrupted[members]
    # A periodic evaluation the signal gave up is made first on resume: the same history.
    assert histories(tmp_path, members) == uninterrupted[f"history {members}"]


def test_a_signal_gives_up_a_periodic_evaluation_of_episodes_that_never_end(
        compose, tmp_path, monkeypatch, capsys):
    """An environment without a time limit: each evaluation episode runs to the 100,000-step
    cap. SIGTERM in a periodic evaluation ends the run within seconds (before: after the
    capped episodes), and its checkpoint keeps the evaluation pending."""
    import rs_lightning.analysis.periodic_evaluation as periodic

    real = periodic.evaluate_policy
    sent = []

    def signalled(*args, **kwargs):
        sent.append(time.perf_counter())
        os.kill(os.getpid(), signal.SIGTERM)
        return real(*args, **kwargs)

    overrides = ["agent=dqn", "debug=quick", "logger=none", "callbacks.progress_bar=false",
                 "env=gym", "env.id=tests.gym_test_envs:NeverEnds-v0", "env.return_min=-1",
                 "env.return_max=1", "env.reward_scale=1", "trainer.max_steps=100",
                 "evaluation.every_n_steps=50", "evaluation.episodes_during_training=4",
                 "evaluation.batch_envs=1"]
    with monkeypatch.context() as patch:
        patch.setattr(periodic, "evaluate_policy", signalled)
        assert run_job_here(compose, overrides, tmp_path, monkeypatch) == 143
    assert time.perf_counter() - sent[0] < 5.0
    (line,) = fault_lines(capsys)
    assert line.startswith("Stopped by SIGTERM: ") and "last.ckpt (update 50)" in line
    state = torch.load(tmp_path / "checkpoints" / "last.ckpt", weights_only=True)
    (pending,) = [c["pending"] for c in state["callbacks"].values() if "pending" in c]
    assert pending["step"] == 50 and pending["members_done"] == 0


# ---------------------------------------------------------------- damaged files in a run folder
def test_damaged_lines_of_a_history_are_dropped_with_a_warning(tmp_path, capsys):
    history = tmp_path / "eval_history.jsonl"
    history.write_bytes(b'{"step": 100, "utility": 0.1}\n\xff\xfe\x00garbage\n[1, 2]\n"text"\n'
                        b'{"step": 200, "utility": 0.2}\n')
    assert [r["step"] for r in read_jsonl(history)] == [100, 200]
    assert capsys.readouterr().err.count("skipping an unreadable line") == 3
    truncate_jsonl(history, lambda r: r["step"] <= 100)  # what a resume from step 100 keeps
    assert history.read_text() == '{"step": 100, "utility": 0.1}\n'


def test_a_damaged_members_json_makes_the_same_command_evaluate_again(
        compose, tmp_path, monkeypatch, uninterrupted):
    """members.json marks a several-seed run finished; damaged, the job resumes from its
    final checkpoint and writes it again, with the same evaluations."""
    overrides = [*PHASED, "parallel_seeds=2"]
    assert run_job_here(compose, overrides, tmp_path, monkeypatch) == 0
    members = (tmp_path / "members.json").read_bytes()
    (tmp_path / "members.json").write_bytes(members[: len(members) // 2])
    assert run_job_here(compose, overrides, tmp_path, monkeypatch) == 0
    assert (tmp_path / "members.json").read_bytes() == members
    assert eval_files(tmp_path, 2) == uninterrupted[2]


# ---------------------------------------------------------------- rewards and the support
def test_a_reward_far_outside_the_return_support_warns_once(compose, tmp_path, capsys):
    # Risky rewards pays about -1 to +1 a step; a support of [-0.1, 0.1] cannot hold it.
    run(compose([*PHASED, "env.return_min=-0.1", "env.return_max=0.1"]), run_dir=tmp_path / "a")
    err = capsys.readouterr().err
    assert err.count("lies far outside the return support [-0.1, 0.1]") == 1, err[-2000:]
    assert "(env.return_min, env.return_max)" in err and "env.reward_scale" in err
    run(compose(PHASED), run_dir=tmp_path / "b")
    assert "far outside" not in capsys.readouterr().err


def test_sigterm_during_the_final_evaluation_from_outside(tmp_path):
    """The real signal, sent by another process while the final evaluation runs (the run's
    last checkpoint is written, eval.json not yet): one line, exit 143, and the same command
    then only evaluates."""
    run_dir = tmp_path / "run"
    args = [*QUICK_DQN, "trainer.max_steps=100", "evaluation.every_n_steps=0",
            "evaluation.episodes=200000", "evaluation.batch_envs=100", "logger=none",
            f"hydra.run.dir={run_dir}"]
    with open(tmp_path / "stderr.txt", "w") as stderr:
        process = subprocess.Popen(
            [sys.executable, str(ROOT / "train.py"), *args], cwd=ROOT,
            env=dict(os.environ, WANDB_MODE="offline"), stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL, stderr=stderr,
        )
        final = run_dir / "checkpoints" / "step0000100.ckpt"
        deadline = time.monotonic() + 240
        while not final.exists() and process.poll() is None and time.monotonic() < deadline:
            time.sleep(0.01)
        time.sleep(1.0)  # into the final evaluation (200,000 episodes take much longer)
        process.send_signal(signal.SIGTERM)
        process.wait(timeout=120)
    err = (tmp_path / "stderr.txt").read_text()
    assert process.returncode == 143, err[-3000:]
    assert not (run_dir / "eval.json").exists(), "the evaluation ended before the signal"
    lines = [line for line in err.splitlines() if line.startswith(("Error", "Stopped"))]
    expected = (f"Stopped by SIGTERM: the run's state is in {run_dir / 'checkpoints'}/"
                "last.ckpt (update 100); the same command resumes it")
    assert lines == [expected], err[-3000:]
    assert "Traceback" not in err


def test_a_real_full_disk_during_a_checkpoint_is_one_line_and_exit_4(tmp_path):
    """A real file system too small for the first checkpoint (a 200 KB tmpfs): torch's
    writer reports the full disk as a RuntimeError, which the run answers as the OSError
    it is (before: 62 lines and exit 1)."""
    disk = tmp_path / "small_disk"
    disk.mkdir()
    made = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=200k", "tmpfs", str(disk)],
                          capture_output=True, text=True)
    if made.returncode != 0:
        pytest.skip(f"no small file system can be mounted here: {made.stderr.strip()[:200]}")
    try:
        result = train_cli(*QUICK_DQN, "logger=none", f"hydra.run.dir={disk}/run")
    finally:
        subprocess.run(["umount", "-l", str(disk)], capture_output=True)
    assert "Traceback" not in result.stderr, result.stderr[-3000:]
    assert result.returncode == 4, result.stderr[-3000:]
    (line,) = [line for line in result.stderr.splitlines() if line.startswith("Error")]
    assert line.startswith("Error writing the run: No space left on device: ")
    assert ".ckpt; the run stopped and no checkpoint had been written yet" in line


ENVIRONMENT_FAULTS = [
    ("nan_reward", "step() returned the reward nan"),
    ("inf_reward", "step() returned the reward inf"),
    ("huge_reward", "step() returned the reward 1e+308"),
    ("nan_obs", "step() returned a non-finite observation (nan)"),
    ("shape", "step() changed the observation shape from [2] to [3]"),
    ("four_tuple", "the old gym API"),
    ("raise", "step() raised RuntimeError: the simulator lost its connection"),
    # raised by the restart of an ended episode, which the vector env's step() runs
    ("raise_in_reset", "reset() raised RuntimeError: the simulator could not restart"),
]


FAULTY_ENV = ["agent=dqn", "debug=quick", "logger=none", "callbacks.progress_bar=false",
              "env=gym", "env.id=tests.gym_test_envs:Faulty-v0", "env.return_min=0",
              "env.return_max=3", "env.reward_scale=1"]


@pytest.mark.parametrize("fault, expected", ENVIRONMENT_FAULTS)
def test_a_broken_environment_is_named_in_one_line_by_the_job(
        compose, tmp_path, monkeypatch, capsys, fault, expected):
    """Every fault, through the job train.py runs (in-process: no interpreter start-up)."""
    status = run_job_here(compose, [*FAULTY_ENV, f"+env.kwargs.fault={fault}"],
                          tmp_path / "run", monkeypatch)
    assert status == 5
    (line,) = fault_lines(capsys)
    assert line.startswith("Error in the environment: tests.gym_test_envs:Faulty-v0: ")
    assert expected in line


# The command line, end to end (about 9 s each, mostly imports): the test above checks every
# fault's line through the same job; two here, a bad value and an exception inside step(),
# show that the command prints that line alone and exits 5. The rest run with -m slow.
@pytest.mark.parametrize("fault, expected", [
    pytest.param(*case, marks=() if case[0] in ("nan_reward", "raise") else pytest.mark.slow)
    for case in ENVIRONMENT_FAULTS])
def test_a_broken_environment_is_named_in_one_line(tmp_path, fault, expected):
    result = train_cli(*FAULTY_ENV, f"+env.kwargs.fault={fault}", f"hydra.run.dir={tmp_path}/run")
    assert "Traceback" not in result.stderr, result.stderr[-3000:]
    assert result.returncode == 5, result.stderr[-3000:]
    (line,) = [line for line in result.stderr.splitlines() if line.startswith("Error")]
    assert line.startswith("Error in the environment: tests.gym_test_envs:Faulty-v0: ")
    assert expected in line


def test_without_home_w_and_b_stays_quiet(tmp_path):
    """Without HOME (a cron job, a bare container) W&B's service logged every connection to
    stderr (18 lines a run); the run's output is its own lines alone."""
    env = {key: value for key, value in os.environ.items()
           if key not in ("HOME", "XDG_CACHE_HOME")}
    env["WANDB_MODE"] = "offline"
    # A short run (60 updates, no periodic evaluation): W&B's start and finish are the point.
    result = train_cli(*QUICK_DQN, "trainer.max_steps=60", "evaluation.every_n_steps=0",
                       f"hydra.run.dir={tmp_path}/run", env=env)
    assert result.returncode == 0, result.stderr[-3000:]
    lines = [line for line in result.stderr.splitlines() if line.strip()]
    assert len(lines) <= 2, "\n".join(lines)
    assert list((tmp_path / "run").glob("wandb/offline-run-*"))


def test_metrics_of_a_run_stopped_in_a_periodic_evaluation_are_the_uninterrupted_ones(
        compose, tmp_path, monkeypatch, capsys):
    """The given-up evaluation is logged on resume at the checkpoint's own step, beside the
    rows the run logged there before the signal: metrics.csv has every row of the
    uninterrupted run, in its order."""
    import rs_lightning.analysis.periodic_evaluation as periodic
    from tests.test_train import csv_steps

    overrides = [*PHASED, "logger=csv"]
    run(compose(overrides), run_dir=tmp_path / "full")
    real = periodic.evaluate_policy
    calls = []

    def signalled(*args, **kwargs):
        calls.append(1)
        if len(calls) == 2:  # the evaluation of update 200, the last periodic one
            os.kill(os.getpid(), signal.SIGTERM)
        return real(*args, **kwargs)

    with monkeypatch.context() as patch:
        patch.setattr(periodic, "evaluate_policy", signalled)
        assert run_job_here(compose, overrides, tmp_path / "stopped", monkeypatch) == 143
    assert run_job_here(compose, overrides, tmp_path / "stopped", monkeypatch) == 0
    assert csv_steps(tmp_path / "stopped") == csv_steps(tmp_path / "full")
    assert histories(tmp_path / "stopped", 1) == histories(tmp_path / "full", 1)
