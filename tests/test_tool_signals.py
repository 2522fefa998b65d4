"""SIGTERM and SIGINT to the tools: one line, exit 143 / 130, no process of theirs left, and
the same command resumes (``rs-lightning benchmark``) or does the work again."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from rs_lightning.app.signals import child_status, exit_status, run_child


def _children(pid: int) -> list[int]:
    """The processes whose parent is ``pid`` (from /proc)."""
    found = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                stat = (entry / "stat").read_text()
            except OSError:
                continue
            if int(stat.rsplit(")", 1)[1].split()[1]) == pid:
                found.append(int(entry.name))
    return found


def _group_alive(pgid: int) -> bool:
    try:
        os.killpg(pgid, 0)
        return True
    except ProcessLookupError:
        return False


def _wait_for(condition, process, seconds: float) -> None:
    deadline = time.monotonic() + seconds
    while not condition():
        assert process.poll() is None, "the command ended before the signal"
        assert time.monotonic() < deadline, "the command never got there"
        time.sleep(0.05)


TOOL = [sys.executable, "-m", "rs_lightning.app.console"]  # rs-lightning
BENCHMARK = ["--worlds", "two_stage", "--agents", "c51", "--measures", "cvar", "--objectives",
             "per_decision", "--seeds", "1", "--wandb", "off", "trainer.max_steps=400",
             "trainer.checkpoint_every_n_steps=50", "evaluation.episodes=50",
             "learning.target_update_period=50"]


def _benchmark(tmp_path: Path, stderr) -> subprocess.Popen:
    return subprocess.Popen(
        [*TOOL, "benchmark", *BENCHMARK, "--out", "sweep"],
        cwd=tmp_path, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=stderr)


@pytest.mark.parametrize("signum", [signal.SIGTERM,
                                    # and the same command resumes the sweep
                                    pytest.param(signal.SIGINT, marks=pytest.mark.slow)])
def test_a_signal_to_the_benchmark_stops_its_sweep_and_the_same_command_resumes(
        tmp_path, signum):
    """The real signal from another process while the sweep's run trains: the run saves
    its state, nothing of the benchmark is left running, one line, 143 / 130; the same
    command then resumes the run from that state and writes the leaderboard."""
    log = tmp_path / "stderr.txt"
    with open(log, "w") as stderr:
        benchmark = _benchmark(tmp_path, stderr)
        _wait_for(lambda: any(tmp_path.glob("sweep/*/checkpoints/step*.ckpt")), benchmark, 240)
        (child,) = _children(benchmark.pid)
        assert os.getpgid(child) == child != os.getpgid(benchmark.pid)  # a group of its own
        benchmark.send_signal(signum)
        benchmark.wait(timeout=60)
    err = log.read_text()
    name = signal.Signals(signum).name
    assert benchmark.returncode == {signal.SIGTERM: 143, signal.SIGINT: 130}[signum], err[-3000:]
    assert not _group_alive(child), "a process of the sweep outlived the benchmark"
    stopped = [line for line in err.splitlines() if line.startswith("Stopped by")]
    assert stopped[0].startswith(f"Stopped by {name}: the run's state is in ")  # the run's
    assert stopped[-1] == (f"Stopped by {name}: the sweep in sweep stopped with its runs' "
                           "state saved; the same command resumes it: rs-lightning benchmark "
                           + " ".join(BENCHMARK) + " --out sweep")
    assert "Traceback" not in err
    (run,) = (tmp_path / "sweep").glob("*/checkpoints/last.ckpt")
    assert not (run.parent.parent / "eval.json").exists()
    if signum == signal.SIGTERM:
        return  # what the same command then does: the slow variant
    again = subprocess.run([*TOOL, "benchmark", *BENCHMARK, "--out", "sweep"], cwd=tmp_path,
                           stdin=subprocess.DEVNULL, capture_output=True, text=True, timeout=300)
    assert again.returncode == 0, again.stderr[-3000:]
    assert "[rs_lightning] resuming " in again.stderr and "(step " in again.stderr
    assert (tmp_path / "sweep" / "leaderboard.md").is_file()


def test_a_signal_to_a_tool_working_in_its_own_process_is_one_line(tmp_path):
    """frontier, evaluate, report work in their own process: SIGTERM while the tool is still
    starting (importing) gives the same one line and status as later on."""
    process = subprocess.Popen([*TOOL, "frontier", str(tmp_path)],
                               stdin=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    time.sleep(0.5)
    process.send_signal(signal.SIGINT)
    _, err = process.communicate(timeout=60)
    assert process.returncode == 130
    assert err.strip() == ("Stopped by SIGINT: rs-lightning frontier ended before it finished; "
                           "the same command does the work again")


@pytest.mark.parametrize("child, signals, grace, status", [
    ("", 1, 30, 143),  # SIGTERM ends it: 128 + 15
    ("signal.signal(signal.SIGTERM, signal.SIG_IGN)\n", 2, 30, 137),  # the second kills
    ("signal.signal(signal.SIGTERM, signal.SIG_IGN)\n", 1, 1, 137),  # the grace period does
], ids=["obeys", "second signal", "grace period"])
def test_run_child_ends_every_process_of_the_group(tmp_path, child, signals, grace, status):
    """A child that starts a worker of its own, as a launcher does: both end at the signal;
    a child that ignores it is killed at a second signal, or after the grace period."""
    script = tmp_path / "parent.py"
    script.write_text(
        "import signal, subprocess, sys, time\n" + child +
        "subprocess.Popen([sys.executable, '-c', 'import time; time.sleep(600)'])\n"
        f"open({str(tmp_path / 'ready')!r}, 'w').close()\n"
        "time.sleep(600)\n")
    runner = tmp_path / "runner.py"
    runner.write_text(
        "import sys\n"
        "from rs_lightning.app.signals import run_child\n"
        f"status, stopped = run_child([sys.executable, {str(script)!r}], grace={grace})\n"
        "print(status, stopped)\n")
    process = subprocess.Popen([sys.executable, str(runner)], stdout=subprocess.PIPE, text=True)
    _wait_for(lambda: (tmp_path / "ready").exists(), process, 60)
    (child_pid,) = _children(process.pid)
    start = time.monotonic()
    for _ in range(signals):
        process.send_signal(signal.SIGTERM)
        time.sleep(0.3)
    out, _ = process.communicate(timeout=30)
    assert time.monotonic() - start < grace + 5
    assert out.split() == [str(status), str(int(signal.SIGTERM))]
    deadline = time.monotonic() + 5  # a killed worker is gone once its new parent reaps it
    while _group_alive(child_pid) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert not _group_alive(child_pid)


def test_exit_statuses_are_those_a_shell_reports():
    assert exit_status(signal.SIGTERM) == 143 and exit_status(signal.SIGINT) == 130
    assert child_status(-signal.SIGKILL) == 137 and child_status(2) == 2
    status, stopped = run_child([sys.executable, "-c", "raise SystemExit(3)"])
    assert (status, stopped) == (3, None)


# ----------------------------------------------------------------------------- the resume recipe
@pytest.mark.parametrize("folder", [
    "outputs/runs/2026-11-29_04-11-06_alpha=0.3,risk=cvar",
    'outputs/runs/x_env.kwargs=[1,2],+y="z w",back\\slash\\', "it's \\\"quoted\\\"\\"])
def test_a_folder_name_quoted_for_hydra_reads_back_whole(folder):
    from hydra.core.override_parser.overrides_parser import OverridesParser

    from rs_lightning.app.run_folders import hydra_quoted

    parser = OverridesParser.create()
    (override,) = parser.parse_overrides([f"hydra.run.dir={hydra_quoted(folder)}"])
    assert override.value() == folder and not override.is_sweep_override()


@pytest.mark.slow  # two runs, about a minute on a busy 2-core machine
def test_a_run_in_a_dated_folder_prints_the_command_that_resumes_it(tmp_path):
    """Run again, the same command would start a new dated folder: the line gives the
    command with the folder, quoted for Hydra (its name holds '=' and ',') and for the
    shell, and that command, split as a shell splits it, resumes the run."""
    import shlex

    from tests.conftest import ROOT
    from tests.warm_python import command as python_command

    overrides = ["agent=dqn", "alpha=0.3", "risk=cvar", "debug=quick", "logger=none",
                 "callbacks.progress_bar=false", "evaluation.every_n_steps=0",
                 "evaluation.episodes=100"]
    log = tmp_path / "stderr.txt"
    with open(log, "w") as stderr:
        run = subprocess.Popen([*python_command(), str(ROOT / "train.py"), *overrides],
                               cwd=tmp_path, stdin=subprocess.DEVNULL,
                               stdout=subprocess.DEVNULL, stderr=stderr)
        _wait_for(lambda: any(tmp_path.glob("outputs/runs/*/checkpoints/step*.ckpt")), run, 240)
        run.send_signal(signal.SIGTERM)
        run.wait(timeout=60)
    assert run.returncode == 143
    (folder,) = (tmp_path / "outputs" / "runs").iterdir()
    assert "_agent=dqn,alpha=0.3," in folder.name  # the name Hydra's parser splits
    (line,) = [line for line in log.read_text().splitlines() if line.startswith("Stopped")]
    head, command = line.split("; resume it with: ")
    assert command == shlex.join(["python", str(ROOT / "train.py"), *overrides]) + (
        f" 'hydra.run.dir=\"outputs/runs/{folder.name}\"'")
    words = shlex.split(command)
    again = subprocess.run([*python_command(), *words[1:]], cwd=tmp_path, capture_output=True,
                           text=True, timeout=300, stdin=subprocess.DEVNULL)
    assert again.returncode == 0, again.stderr[-3000:]
    assert f"[rs_lightning] resuming {folder} from last.ckpt" in again.stderr
    assert [p.name for p in (tmp_path / "outputs" / "runs").iterdir()] == [folder.name]
    assert (folder / "eval.json").is_file()
