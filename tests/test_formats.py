"""Run folders and checkpoints of older formats load through one migration step per format
(rs_lightning.config.migrations); a run of a newer format is refused in one line.

The stored runs in tests/data/runs/ were written by earlier versions (tests/data/runs/README.md
names each version and command): they are what a user's old outputs hold.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
import torch
from omegaconf import OmegaConf

import rs_lightning
from rs_lightning.app.console import main as console
from rs_lightning.app.train import run
from rs_lightning.config.migrations import (
    FORMAT_KEY,
    FORMAT_VERSION,
    STEPS,
    NewerFormat,
    migrate_checkpoint,
    migrate_config,
    read_run_config,
)
from rs_lightning.engine.checkpoints import DATAMODULE, read_checkpoint

RUNS = Path(__file__).resolve().parent / "data" / "runs"
FORMAT_1 = RUNS / "format1_c51"  # before 0.1.0
FORMAT_2 = RUNS / "format2_c51"  # 0.2.0, the same command
FORMAT_2_DSAC = RUNS / "format2_dsac"  # after 0.2.0, before DSAC's agent.actor_law
# The command of the stored C51 runs (README.md there), as overrides of today's conf/.
C51_RUN = ["debug=quick", "agent=c51", "agent.hidden_sizes=[16]", "learning.replay_capacity=128",
           "trainer.checkpoint_every_n_steps=0", "evaluation.episodes=200", "logger=none",
           "callbacks.progress_bar=false"]


def recorded(folder: Path) -> dict:
    return OmegaConf.to_container(OmegaConf.load(folder / "config.yaml"))


def flat_keys(node, prefix=""):
    if isinstance(node, dict) and node:
        return {key for name, value in node.items() for key in flat_keys(value, f"{prefix}{name}.")}
    return {prefix[:-1]}


# ------------------------------------------------------------------------ the steps
def test_step_1_gives_the_config_that_0_2_wrote_for_the_same_command():
    old = recorded(FORMAT_1)
    assert "network" not in old and "n_step" not in old["learning"]  # what format 1 lacked
    STEPS[1][0](old)
    assert old == recorded(FORMAT_2)


def test_step_2_gives_the_keys_of_todays_config(compose):
    migrated = migrate_config(recorded(FORMAT_2))
    assert migrated["learning"]["target_update_rate"] == 1.0
    assert migrated["plugins"] == []
    today = OmegaConf.to_container(compose(C51_RUN), resolve=True)
    today.pop("hydra", None)
    assert flat_keys(migrated) == flat_keys(today)


def test_step_2_gives_dsac_the_actor_law_it_had():
    old = recorded(FORMAT_2_DSAC)
    assert "actor_law" not in old["agent"]
    assert migrate_config(old)["agent"]["actor_law"] == "pessimistic"


def test_step_4_records_that_older_runs_logged_no_episode_video():
    old = recorded(FORMAT_2)
    assert "video" not in old["logger"]
    assert migrate_config(old)["logger"]["video"] is False  # today's default is true
    assert migrate_config({**old, FORMAT_KEY: 5, "logger": {**old["logger"], "video": True}}
                          )["logger"]["video"] is True


def test_step_4_records_that_older_runs_stepped_their_worlds_through_gymnasium():
    old = recorded(FORMAT_2)
    assert "backend" not in old["env"]
    assert migrate_config(old)["env"]["backend"] == "gymnasium"
    assert migrate_config({**old, FORMAT_KEY: 5, "env": {**old["env"], "backend": "torch"}}
                          )["env"]["backend"] == "torch"


def test_the_sweeper_target_once_called_objective_moves_to_search_objective():
    old = recorded(FORMAT_1)
    old["objective"] = {"metric": "cvar", "evaluation": "best"}
    migrated = migrate_config(old)
    assert migrated["search_objective"] == {"metric": "cvar", "evaluation": "best"}
    assert migrated["objective"] == "per_decision"


def test_a_recorded_value_is_never_changed():
    old = recorded(FORMAT_1)
    old["learning"]["n_step"] = 3
    assert migrate_config(old)["learning"]["n_step"] == 3


def test_step_1_renames_the_weights_and_fills_the_collector():
    state = read_checkpoint(FORMAT_1 / "checkpoints" / "last.ckpt", "checkpoint")
    collector = state[DATAMODULE]["collector"]
    assert any(k.startswith("agent.") for k in state["state_dict"])
    assert "pending_updates" in collector and "discount" not in collector["replay"]
    credit = collector["pending_updates"]
    migrate_checkpoint(state, gamma=0.9)
    assert {k.split(".")[0] for k in state["state_dict"]} == {"members", "target_members"}
    assert collector["update_credit"] == credit and "pending_updates" not in collector
    assert (collector["n_step"], collector["updates_per_step"]) == (1, [1, 1])
    replay = collector["replay"]
    torch.testing.assert_close(replay["discount"], (1.0 - replay["terminated"]) * 0.9)
    assert state["rs_lightning"][FORMAT_KEY] == FORMAT_VERSION


# ------------------------------------------------------------------ old runs load
@pytest.mark.parametrize("folder, obs", [(FORMAT_1, [[0, 0], [2, 1]]), (FORMAT_2, [[0, 0], [2, 1]]),
                                         (FORMAT_2_DSAC, [[1.0, 0.0, 0.0]])])
def test_an_old_run_loads_and_evaluates_to_its_own_eval_json(folder, obs):
    """The migrated config and checkpoint rebuild the very agent that ran: its evaluation
    repeats the run's final one."""
    agent = rs_lightning.load_agent(folder)
    written = json.loads((folder / "eval.json").read_text())
    assert agent.act(obs).shape[0] == len(obs)
    evaluated = agent.evaluate(episodes=written["episodes"])
    assert evaluated["expectation"] == written["expectation"]
    assert evaluated["utility"] == written["utility"]


@pytest.mark.parametrize("folder", [FORMAT_1, FORMAT_2])
def test_an_old_policy_json_without_action_names_is_drawn_and_its_actions_named(folder, tmp_path,
                                                                              capsys):
    """policy.json gained the actions' names beside the cells' numbers: a file without them
    is still drawn, and the API names an old run's actions from its environment."""
    table = json.loads((folder / "policy.json").read_text())
    assert "action_names" not in table
    out = tmp_path / "policy.png"
    assert console(["plots", "policy", str(folder), "--out", str(out)]) == 0
    assert out.read_bytes()[:4] == b"\x89PNG"
    agent = rs_lightning.load_agent(folder)
    assert agent.action_names == ("right", "down", "left", "up")
    assert agent.name_actions(agent.act([[1, 0]])) == [agent.action_names[table["1,0"]]]


def test_old_runs_of_one_setting_share_one_row_of_the_results():
    rows = [row for folder in (FORMAT_1, FORMAT_2)
            for row in rs_lightning.load_runs(folder, as_frame=False)]
    settings = [{k: v for k, v in row.items() if k.startswith("settings.")} for row in rows]
    assert len(rows) == 2 and settings[0] and settings[0] == settings[1]
    assert not any(FORMAT_KEY in key for key in settings[0])


def test_a_format_1_checkpoint_resumes(compose, tmp_path):
    checkpoint = tmp_path / "old.ckpt"
    shutil.copy(FORMAT_1 / "checkpoints" / "last.ckpt", checkpoint)
    summary = run(compose([*C51_RUN, "trainer.max_steps=340", f"ckpt_path={checkpoint}"]),
                  run_dir=tmp_path / "resumed")
    assert summary["steps"] == 340
    state = torch.load(tmp_path / "resumed" / "checkpoints" / "last.ckpt", weights_only=True)
    assert state["rs_lightning"][FORMAT_KEY] == FORMAT_VERSION
    assert state[DATAMODULE]["collector"]["env_steps"] == 332 + 40
    assert (tmp_path / "resumed" / "config.yaml").read_text().startswith(
        f"{FORMAT_KEY}: {FORMAT_VERSION}\n")
    assert read_run_config(tmp_path / "resumed").agent.name == "c51"


# ----------------------------------------------------------------- newer formats
@pytest.fixture
def newer_run(tmp_path):
    folder = tmp_path / "newer"
    shutil.copytree(FORMAT_2, folder)
    config = recorded(folder)
    config[FORMAT_KEY] = FORMAT_VERSION + 1
    (folder / "config.yaml").write_text(OmegaConf.to_yaml(OmegaConf.create(config)))
    return folder


def test_a_run_of_a_newer_format_is_one_line_in_the_api_and_the_tools(newer_run, capsys):
    with pytest.raises(NewerFormat, match=f"format {FORMAT_VERSION + 1} by a newer rs-lightning"):
        rs_lightning.load_agent(newer_run)
    for tool in ("results", "evaluate"):
        assert console([tool, str(newer_run)]) == 2
        lines = capsys.readouterr().err.strip().splitlines()
        assert len(lines) == 1 and "upgrade rs-lightning" in lines[0], lines


def test_a_checkpoint_of_a_newer_format_is_refused(tmp_path):
    state = torch.load(FORMAT_2 / "checkpoints" / "last.ckpt", weights_only=True)
    state["rs_lightning"][FORMAT_KEY] = FORMAT_VERSION + 1
    torch.save(state, tmp_path / "newer.ckpt")
    with pytest.raises(NewerFormat, match="newer.ckpt"):
        read_checkpoint(tmp_path / "newer.ckpt")


def test_a_folder_of_a_newer_format_is_never_trained_into(compose, newer_run):
    before = {p: p.read_bytes() for p in newer_run.rglob("*") if p.is_file()}
    with pytest.raises(NewerFormat):
        run(compose(C51_RUN), run_dir=newer_run)
    assert {p: p.read_bytes() for p in newer_run.rglob("*") if p.is_file()} == before
