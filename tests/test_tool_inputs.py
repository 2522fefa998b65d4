"""The tools that read trained runs (evaluate, frontier, plots distributions, gym-results
heatmap) never break a run, never report a setting a policy cannot depend on, never pool runs
of different settings, and answer bad input with one line and exit status 2."""

from __future__ import annotations

import fcntl
import json
import os
import shutil

import pytest
import yaml

import rs_lightning
from rs_lightning.app.commands import evaluation, frontier, gym_results, plots
from rs_lightning.app.run_folders import finished_summary

QUICK = ["debug=quick", "logger=none", "callbacks.progress_bar=false", "trainer.max_steps=40",
         "evaluation.every_n_steps=0", "evaluation.episodes=20"]


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    """Three short finished runs: C51 with two stacked seeds and QR-DQN on risky rewards,
    TQC on Pendulum (an actor-critic that is not risk-conditioned)."""
    from hydra import compose, initialize_config_dir

    from rs_lightning.app.train import run
    from tests.conftest import CONF

    overrides = {
        "seeds": ["agent=c51", "parallel_seeds=2"],
        "qr": ["agent=qr_dqn"],
        "tqc": ["agent=tqc", "env=pendulum", "agent.hidden_sizes=[16]", "trainer.max_steps=10",
                "evaluation.episodes=2"],
    }
    folders = {}
    for name, extra in overrides.items():
        folder = tmp_path_factory.mktemp(name)
        with initialize_config_dir(config_dir=str(CONF), version_base="1.3"):
            cfg = compose("train", [*QUICK, *extra])
        run(cfg, run_dir=folder)
        folders[name] = folder
    return folders


def copy_run(runs, name, folder):
    shutil.copytree(runs[name], folder, ignore=shutil.ignore_patterns("frontier*", "eval_*"))
    return folder


def files_of(folder):
    return {p.relative_to(folder): p.stat().st_mtime_ns for p in folder.rglob("*")}


def refused(capsys, text):
    """The command's stderr was one error line holding ``text``, no traceback."""
    err = capsys.readouterr().err
    lines = [line for line in err.splitlines() if line.startswith("error: ")]
    assert len(lines) == 1 and text in lines[0] and "Traceback" not in err, err
    return lines[0]


def test_an_interrupted_or_failed_run_is_refused_and_stays_resumable(runs, tmp_path, capsys):
    """A run with checkpoints and no eval.json (stopped during training) is the training
    command's to resume: evaluate (at its own or another setting, with --overwrite too) and
    frontier refuse it and write nothing there. The same for a failed run, and for a seed
    of a several-seed run whose members.json (the run's finished mark) is missing."""
    interrupted = copy_run(runs, "qr", tmp_path / "interrupted")
    (interrupted / "eval.json").unlink()
    failed = copy_run(runs, "qr", tmp_path / "failed")
    (failed / "failed.json").write_text('{"error": "NumericalFault"}')
    seeds = copy_run(runs, "seeds", tmp_path / "seeds")
    (seeds / "members.json").unlink()  # the seeds' eval.json are there, the run's mark is not
    for folder, why in ((interrupted, "its newest checkpoint is at update 40"),
                        (failed, "failed"), (seeds / "seed_0", "has not finished")):
        before = files_of(folder)
        for arguments in ([], ["alpha=0.3"], ["--overwrite"]):
            assert evaluation.main([str(folder), *arguments, "--episodes", "5"]) == 2
            refused(capsys, why)
        assert frontier.main([str(folder), "--alpha", "0,1", "--episodes", "5",
                              "--wandb", "off"]) == 2
        refused(capsys, "has not finished")
        assert files_of(folder) == before
    assert finished_summary(interrupted) is None and finished_summary(seeds) is None


def test_a_run_another_process_holds_is_refused(runs, capsys):
    """While train.py holds a run's lock (here: its flock, taken as another process takes
    it), evaluate and frontier stop at once, naming the holder."""
    lock = runs["qr"] / "run.lock"
    fd = os.open(lock, os.O_RDWR | os.O_CREAT, 0o644)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        os.write(fd, json.dumps({"pid": 4242, "host": "trainer", "started": "now"}).encode())
        before = (runs["qr"] / "eval.json").read_text()
        assert evaluation.main([str(runs["qr"]), "alpha=0.2", "--episodes", "5"]) == 2
        refused(capsys, "is in use by process 4242 on trainer")
        assert evaluation.main([str(runs["qr"]), "--overwrite", "--episodes", "5"]) == 2
        refused(capsys, "is in use by process 4242")
        assert frontier.main([str(runs["qr"]), "--alpha", "0,1", "--episodes", "5",
                              "--wandb", "off"]) == 2
        refused(capsys, "is in use by process 4242")
        assert (runs["qr"] / "eval.json").read_text() == before
        assert not (runs["qr"] / "eval_alpha=0.2.json").exists()
    finally:
        os.close(fd)
        lock.unlink()


def test_settings_are_settings_and_eval_json_is_replaced_only_on_request(
        runs, tmp_path, monkeypatch, capsys):
    """``alpha=0.3`` and ``rho=0.2`` are settings even beside folders of those names; a
    finished run's eval.json, and an evaluation at a setting done before, are replaced only
    with --overwrite."""
    run = copy_run(runs, "qr", tmp_path / "run")
    monkeypatch.chdir(tmp_path)
    (tmp_path / "alpha=0.3").mkdir()
    (tmp_path / "rho=0.2").mkdir()
    kept = (run / "eval.json").read_text()
    assert evaluation.main(["run", "alpha=0.3", "--episodes", "5"]) == 0
    at = json.loads((run / "eval_alpha=0.3.json").read_text())
    assert at["alpha"] == 0.3 and at["episodes"] == 5 and "re-weighed" in at["meaning"]
    assert "re-weighed" in capsys.readouterr().out
    assert evaluation.main(["run", "rho=0.2", "--episodes", "5"]) == 0
    assert json.loads((run / "eval_rho=0.2.json").read_text())["rho"] == 0.2
    assert (run / "eval.json").read_text() == kept
    # Replaced only on request: the 20-episode eval.json by a 5-episode one, an evaluation
    # at a setting by another.
    assert evaluation.main(["run", "--episodes", "5"]) == 2
    refused(capsys, "run/eval.json exists (20 episodes at update 40): give --overwrite")
    assert evaluation.main(["run", "alpha=0.3", "--episodes", "7"]) == 2
    refused(capsys, "eval_alpha=0.3.json exists (5 episodes at update 40)")
    assert (run / "eval.json").read_text() == kept
    assert evaluation.main(["run", "--episodes", "5", "--overwrite"]) == 0
    assert json.loads((run / "eval.json").read_text())["episodes"] == 5
    assert finished_summary(run) is not None  # still a finished run
    # A folder named like a setting is a run folder when given as a path.
    assert evaluation.main(["./alpha=0.3", "--episodes", "5"]) == 2
    refused(capsys, "not found: is this a run folder?")
    for arguments, text in ((["run", "beta=x"], "beta: must be a finite number"),
                            (["run", "alpha=0.2", "alpha=0.4"], "alpha: given twice"),
                            (["run", "alpha=1.5"], "alpha: must be in [0, 1]"),
                            (["run", "gamma=0.9"], "neither a run folder nor a setting"),
                            (["run", "alpha=0.2", "--episodes", "0"], "--episodes: must be")):
        assert evaluation.main(arguments) == 2
        refused(capsys, text)


def test_no_setting_is_reported_for_a_policy_that_cannot_depend_on_it(runs, tmp_path, capsys):
    """An actor-critic that is not risk-conditioned acts alike at every setting: evaluate at
    another setting, the frontier and the API's ``at`` say so in one line and write nothing;
    its own setting is still evaluated."""
    tqc = copy_run(runs, "tqc", tmp_path / "tqc")
    own = rs_lightning.load_agent(tqc).utility.alpha
    for setting in ("alpha=0.3", "rho=0.3"):
        assert evaluation.main([str(tqc), setting, "--episodes", "2"]) == 2
        refused(capsys, "agent=tqc is an actor-critic trained at one setting")
    assert frontier.main([str(tqc), "--alpha", "0:1:3", "--episodes", "2",
                          "--wandb", "off"]) == 2
    refused(capsys, "a frontier of it would show one policy at every alpha")
    assert not list(tqc.glob("eval_*")) and not list(tqc.glob("frontier*"))
    with pytest.raises(ValueError, match="actor-critic"):
        rs_lightning.load_agent(tqc).at(alpha=1.0)
    assert evaluation.main([str(tqc), f"alpha={own}", "--episodes", "2"]) == 0
    assert json.loads((tqc / f"eval_alpha={own:g}.json").read_text())["meaning"] == (
        "the run's own setting")


def test_frontier_pools_only_seeds_of_one_setting(runs, tmp_path, capsys):
    """Runs of different agents, or of one agent at different settings, or one seed twice,
    are refused, naming what differs; the seeds of one run make one frontier."""
    other_alpha = copy_run(runs, "seeds", tmp_path / "other_alpha") / "seed_1"
    config = yaml.safe_load((other_alpha / "config.yaml").read_text())
    config["alpha"] = 0.3
    (other_alpha / "config.yaml").write_text(yaml.safe_dump(config))
    seed_0 = runs["seeds"] / "seed_0"
    for run_dirs, text in (([runs["seeds"], runs["qr"]], "agent: c51"),
                           ([seed_0, other_alpha], "alpha: 0.5"),
                           ([runs["qr"], runs["tqc"]], "env: rs_lightning/RiskyRewards-v0"),
                           ([seed_0, seed_0], "repeats seed 0 of another run given")):
        assert frontier.main([*map(str, run_dirs), "--alpha", "0,1", "--episodes", "5",
                              "--wandb", "off", "--out", str(tmp_path / "front")]) == 2
        refused(capsys, text)
    assert not (tmp_path / "front").exists()
    assert frontier.main([str(seed_0), str(runs["seeds"] / "seed_1"), "--alpha", "0,1",
                          "--exact-only", "--wandb", "off", "--out", str(tmp_path / "front")]) == 0
    result = json.loads((tmp_path / "front" / "frontier.json").read_text())
    assert [s["seeds"] for s in result["summary"]] == [2, 2] and "re-weighed" in result["meaning"]


@pytest.mark.parametrize("flags, text", [
    (["--alpha", "0:1:2.5"], "--alpha: expected low:high:count"),
    (["--alpha", "0:1:2000000"], "count a whole number from 1 to 1001"),
    (["--alpha", "0:1"], "--alpha: expected"),
    (["--alpha", "0,1.5"], "every alpha in [0, 1]"),
    (["--alpha", "nan"], "--alpha: expected"),
    (["--rho", "0.1,x"], "--rho: expected a comma list"),
    (["--rho", "0"], "--rho 0: risk.rho"),
    (["--episodes", "0"], "--episodes: must be a whole number"),
])
def test_frontier_flags_are_refused_naming_the_flag(runs, capsys, flags, text):
    assert frontier.main([str(runs["qr"]), *flags, "--wandb", "off"]) == 2
    refused(capsys, text)
    assert not (runs["qr"] / "frontier.json").exists()


def test_exact_only_is_refused_where_there_are_no_exact_figures(runs, capsys):
    assert frontier.main([str(runs["tqc"]), "--exact-only", "--wandb", "off"]) == 2
    refused(capsys, "--exact-only: Pendulum-v1 has no exact figures")


def test_a_checkpoint_of_another_run_is_refused_in_one_line(runs, tmp_path, capsys):
    """A C51 checkpoint in a QR-DQN run, or a checkpoint of the same agent with another
    network: load_agent, evaluate, frontier and plots distributions name the file."""
    swapped = copy_run(runs, "qr", tmp_path / "swapped")
    shutil.copy(runs["seeds"] / "seed_0" / "checkpoints" / "last.ckpt",
                swapped / "checkpoints" / "last.ckpt")
    narrower = copy_run(runs, "qr", tmp_path / "narrower")
    config = yaml.safe_load((narrower / "config.yaml").read_text())
    config["agent"]["hidden_sizes"] = [16]
    (narrower / "config.yaml").write_text(yaml.safe_dump(config))
    for folder, text in ((swapped, "was written by agent c51, and the run's config.yaml is "
                                   "agent=qr_dqn"),
                         (narrower, "does not fit the network of the run's config.yaml")):
        with pytest.raises(ValueError, match=text.replace("(", r"\(")):
            rs_lightning.load_agent(folder)
        assert evaluation.main([str(folder), "alpha=0.3", "--episodes", "5"]) == 2
        refused(capsys, text)
        assert frontier.main([str(folder), "--alpha", "0,1", "--wandb", "off"]) == 2
        refused(capsys, text)
        assert plots.main(["distributions", str(folder)]) == 2
        refused(capsys, text)


def test_figures_of_runs_they_cannot_draw_are_refused_in_one_line(runs, capsys):
    assert plots.main(["distributions", str(runs["tqc"])]) == 2
    refused(capsys, "acts in a continuous box")
    assert plots.main(["distributions", str(runs["qr"]), "--cell", "3,0"]) == 2
    refused(capsys, "--cell: 3,0 lies outside the 3 x 3 grid")
    assert plots.main(["distributions", str(runs["qr"]), "--cell", "1;0"]) == 2
    refused(capsys, "--cell: expected the state as whole numbers x,y")
    for run_dir, env in ((runs["tqc"], "Pendulum-v1"), (runs["qr"], "RiskyRewards-v0")):
        assert gym_results.main(["heatmap", str(run_dir), "--episodes", "2"]) == 2
        refused(capsys, f"is a run on {'rs_lightning/' if 'Risky' in env else ''}{env}; the "
                        "heat map draws the cells a greedy policy visits on cliff walking")
