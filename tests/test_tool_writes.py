"""The tools' outputs on a disk that refuses them: an output folder under a file, a full disk.
Each is one line naming the path and the system's reason, exit status 2, no traceback, and
the file that was there before is left whole (every write is atomic)."""

from __future__ import annotations

import errno
import os
import shutil

import pytest

from rs_lightning.app.console import main as rs_lightning
from tests.conftest import short_finished_run


@pytest.fixture(scope="module")
def finished_run(tmp_path_factory):
    """A distributional agent's run: every tool takes it."""
    return short_finished_run(tmp_path_factory.mktemp("finished") / "run", "c51")


def tool_commands(run_dir, out) -> dict[str, list[str]]:
    """Each tool writing below ``out`` (a folder for the ones that write several files)."""
    return {
        "plots": ["plots", "distributions", str(run_dir), "--out", str(out / "dist.png")],
        "frontier": ["frontier", str(run_dir), "--alpha", "0:1:2", "--episodes", "2",
                     "--out", str(out / "frontier")],
        "benchmark --score": ["benchmark", "--score", str(run_dir), "--wandb", "off",
                              "--out", str(out / "leaderboard")],
    }


def one_error_line(capsys) -> str:
    err = capsys.readouterr().err
    assert "Traceback" not in err, err[-3000:]
    errors = [line for line in err.splitlines() if line.startswith("error")]
    assert len(errors) == 1, err[-3000:]
    return errors[0]


@pytest.mark.parametrize("tool", ["plots", "frontier", "benchmark --score"])
def test_an_output_folder_under_a_file_is_one_line(finished_run, tmp_path, capsys, tool):
    blocking = tmp_path / "a_file"
    blocking.write_text("")
    status = rs_lightning(tool_commands(finished_run, blocking / "out")[tool])
    line = one_error_line(capsys)
    assert status == 2
    assert line.startswith(f"error: {blocking}") and line.endswith(
        "(a file stands where a folder is needed)"), line
    assert blocking.read_text() == ""


@pytest.mark.parametrize("tool", ["plots", "frontier", "benchmark --score", "evaluate"])
def test_a_full_disk_is_one_line_and_leaves_the_files_there(finished_run, tmp_path, capsys,
                                                            monkeypatch, tool):
    run_dir = shutil.copytree(finished_run, tmp_path / "run")
    out = tmp_path / "out"
    command = (["evaluate", str(run_dir), "--overwrite", "--episodes", "2"] if tool == "evaluate"
               else tool_commands(run_dir, out)[tool])
    def files():  # the run's files, but the lock a tool holds while it reads the run
        return {p: p.read_bytes() for p in run_dir.rglob("*") if p.is_file()
                and p.name != "run.lock"}

    before = files()

    def full(fd):
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))

    monkeypatch.setattr(os, "fsync", full)  # the disk fills as the first output is flushed
    status = rs_lightning(command)
    line = one_error_line(capsys)
    assert status == 2
    assert line.endswith(": No space left on device") and str(tmp_path) in line, line
    assert files() == before
    # No half-written file, no temporary file left behind.
    assert not [p for p in tmp_path.rglob("*") if p.name.endswith(".tmp")]
    assert not out.exists() or not [p for p in out.rglob("*") if p.is_file()]
