"""The tools read damaged run and sweep folders in one line each, naming the file, and exit
non-zero where their result would be incomplete (issue 32, item 6)."""

from __future__ import annotations

import json
import os
import shutil

import pytest

from rs_lightning.analysis.results import collect
from rs_lightning.app.commands.evaluation import main as evaluate
from rs_lightning.app.commands.report import main as report
from rs_lightning.app.commands.results import main as results
from rs_lightning.app.run_folders import finished_summary
from rs_lightning.files import read_jsonl
from tests.conftest import short_finished_run


@pytest.fixture(scope="module")
def finished_run(tmp_path_factory):
    return short_finished_run(tmp_path_factory.mktemp("finished") / "run", "dqn")


def sweep_of(finished_run, tmp_path, jobs=("0_seed=0", "1_seed=1")):
    """A sweep folder whose jobs are copies of the finished run (names as Hydra's)."""
    sweep = tmp_path / "sweep"
    for job in jobs:
        shutil.copytree(finished_run, sweep / job)
    return sweep


def one_line(text: str) -> str:
    lines = [line for line in text.strip().splitlines() if line.strip()]
    assert len(lines) <= 2, text  # the line, and the summary line of the tool
    return lines[0]


def test_evaluation_takes_a_folder_whose_name_holds_an_equals_sign(finished_run, tmp_path,
                                                                   capsys):
    sweep = sweep_of(finished_run, tmp_path, jobs=("0_alpha=0.3",))
    assert evaluate([str(sweep / "0_alpha=0.3"), "--episodes", "10", "--overwrite"]) == 0
    assert "E=" in capsys.readouterr().out
    # An argument with '=' that is no folder is still a setting.
    assert evaluate([str(sweep / "0_alpha=0.3"), "alpha=abc"]) == 2
    assert "alpha: must be a finite number" in capsys.readouterr().err


@pytest.mark.parametrize("damage, expected", [
    ("config_symlink", "config.yaml: not a regular file"),
    ("config_directory", "config.yaml: not a regular file"),
    ("config_tag", "config.yaml: not a readable config"),
    ("config_malformed", "config.yaml: not a readable config"),
    ("config_list", "config.yaml: holds a list"),
    ("config_empty", "config.yaml: empty, not a run's config"),
    ("config_sectionless", "config.yaml: not a run's config (no env or agent section)"),
    ("eval_nested", "eval.json: unreadable (RecursionError"),
    ("eval_binary", "eval.json: unreadable"),
    ("eval_list", "eval.json: holds a list, not a JSON object"),
    ("eval_directory", "eval.json: not a regular file"),
])
def test_a_damaged_file_is_one_line_and_the_table_exits_non_zero(finished_run, tmp_path,
                                                                 capsys, damage, expected):
    sweep = sweep_of(finished_run, tmp_path)
    job = sweep / "1_seed=1"
    what, _, how = damage.partition("_")
    path = job / ("config.yaml" if what == "config" else "eval.json")
    path.unlink()
    if how == "symlink":
        path.symlink_to("/etc/passwd")
    elif how == "directory":
        path.mkdir()
    elif how == "tag":
        path.write_text("agent: !!python/object/apply:os.system ['echo pwned']\n")
    elif how == "malformed":
        path.write_text("agent: {name: dqn\nseed: [\n")
    elif how == "list":
        path.write_text("- 1\n- 2\n" if what == "config" else "[1, 2]")
    elif how == "binary":
        path.write_bytes(b"\x00\xff\xfe binary \x80")
    elif how == "empty":
        path.write_text("")
    elif how == "sectionless":
        path.write_text("seed: 0\nalpha: 0.5\n")
    elif how == "nested":  # deeper than the JSON parser's recursion goes
        path.write_text('{"expectation": ' + "[" * 100_000 + "]" * 100_000 + "}")
    assert results([str(sweep)]) == 1
    err = capsys.readouterr().err
    warnings = [line for line in err.splitlines() if line.startswith("warning")]
    assert len(warnings) == 1 and expected in warnings[0] and "1_seed=1" in warnings[0]
    assert "Traceback" not in err
    assert "leaves out 1 run(s)" in err
    # The readable job is still in the table.
    assert (sweep / "results.md").is_file()


@pytest.mark.parametrize("name, content, expected", [
    ("eval.json", "[1, 2]", "eval.json: holds a list"),
    ("eval.json", "[" * 100_000 + "]" * 100_000, "eval.json: unreadable (RecursionError"),
    ("config.yaml", "", "config.yaml: empty, not a run's config"),
])
def test_the_report_also_names_the_damaged_file_and_exits_non_zero(finished_run, tmp_path,
                                                                    capsys, name, content,
                                                                    expected):
    sweep = sweep_of(finished_run, tmp_path)
    (sweep / "1_seed=1" / name).write_text(content)
    assert report([str(sweep), "--wandb", "off"]) == 1
    err = capsys.readouterr().err
    warnings = [line for line in err.splitlines() if line.startswith("warning")]
    assert len(warnings) == 1 and expected in warnings[0] and "1_seed=1" in warnings[0]
    assert "Traceback" not in err


@pytest.mark.parametrize("content, expected", [
    ("alpha: !!python/object/apply:os.getcwd []\n", "not a readable config (ConstructorError"),
    ("", "empty, not a run's config"),
    ("agent: {name: dqn\n", "not a readable config (ParserError"),
])
def test_evaluate_names_a_damaged_config_in_one_line(finished_run, tmp_path, capsys, content,
                                                     expected):
    run_dir = shutil.copytree(finished_run, tmp_path / "run")
    (run_dir / "config.yaml").write_text(content)
    before = (run_dir / "eval.json").read_bytes()
    assert evaluate([str(run_dir), "--episodes", "5"]) == 2
    err = capsys.readouterr().err
    assert one_line(err) == f"error: {run_dir / 'config.yaml'}: " + err.split(": ", 2)[2].strip()
    assert expected in err and "Traceback" not in err
    assert (run_dir / "eval.json").read_bytes() == before


def test_a_job_with_its_files_removed_is_named(finished_run, tmp_path, capsys):
    sweep = sweep_of(finished_run, tmp_path)
    for path in (sweep / "1_seed=1").iterdir():
        shutil.rmtree(path) if path.is_dir() else path.unlink()
    rows = collect(sweep)
    assert len(rows) == 1
    assert "1_seed=1: holds no run (its files were removed?)" in capsys.readouterr().err


def test_results_of_a_single_run_read_only_the_run(finished_run, tmp_path, capsys):
    run_dir = shutil.copytree(finished_run, tmp_path / "run")
    (run_dir / ".hydra").mkdir(exist_ok=True)  # as a run that Hydra started has
    (run_dir / ".hydra" / "config.yaml").write_text("seed: 0\n")
    rows = collect(run_dir)
    assert len(rows) == 1 and rows[0]["job"] == "."
    assert "warning" not in capsys.readouterr().err


def test_an_output_folder_that_cannot_be_written_is_one_line(finished_run, tmp_path, capsys):
    sweep = sweep_of(finished_run, tmp_path)
    blocked = tmp_path / "a_file"
    blocked.write_text("")
    assert results([str(sweep), "--out", str(blocked / "table")]) == 2
    assert report([str(sweep), "--wandb", "off", "--out", str(blocked / "report")]) == 2
    err = capsys.readouterr().err
    assert "cannot write the table into" in err and "cannot write the report into" in err
    assert "Traceback" not in err


def test_a_read_only_output_folder_is_one_line(finished_run, tmp_path, capsys):
    if os.geteuid() == 0:
        pytest.skip("root writes into read-only folders (the test above blocks the folder)")
    sweep = sweep_of(finished_run, tmp_path)
    sweep.chmod(0o555)
    try:
        assert results([str(sweep)]) == 2
        assert report([str(sweep), "--wandb", "off"]) == 2
    finally:
        sweep.chmod(0o755)
    err = capsys.readouterr().err
    assert "cannot write the table into" in err and "cannot write the report into" in err
    assert "Traceback" not in err


def test_a_damaged_history_is_reported_once_and_a_directory_holds_no_records(tmp_path, capsys):
    history = tmp_path / "eval_history.jsonl"
    history.write_bytes(b'{"step": 1}\n\x00\x01 not json\n{"step": 2}\n')
    for _ in range(3):  # several figures read the same file
        assert [r["step"] for r in read_jsonl(history)] == [1, 2]
    assert capsys.readouterr().err.count("skipping an unreadable line 2") == 1
    folder = tmp_path / "run" / "eval_history.jsonl"
    folder.mkdir(parents=True)
    assert read_jsonl(folder) == []
    assert "not a regular file" in capsys.readouterr().err


@pytest.mark.parametrize("content", [
    {"members": {}},
    {"seeds": [0, 1], "members": {"0": {"expectation": 1.0}}},
    {"seeds": [0], "members": {"0": "done"}},
    {"seeds": [], "members": {}},
    {"seeds": [0], "members": []},
])
def test_a_members_record_with_bad_content_is_not_taken_as_finished(tmp_path, content):
    (tmp_path / "members.json").write_text(json.dumps(content))
    assert finished_summary(tmp_path) is None


def test_a_complete_members_record_is_finished(tmp_path):
    content = {"seeds": [0, 1], "members": {"0": {"expectation": 1.0},
                                            "1": {"expectation": 0.5}}}
    (tmp_path / "members.json").write_text(json.dumps(content))
    assert finished_summary(tmp_path) == content
    (tmp_path / "eval.json").write_text(json.dumps({"expectation": True}))
    assert finished_summary(tmp_path) is None
