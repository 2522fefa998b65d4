"""benchmarks/peers.py without running a benchmark: the missing extra answered with the
install line (exit 2), the dry run's commands, and the scoring functions on made-up runs."""

from __future__ import annotations

import dataclasses
import importlib.util
import math
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
_spec = importlib.util.spec_from_file_location("peers", ROOT / "benchmarks" / "peers.py")
peers = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(peers)


def test_without_the_extra_it_says_how_to_install_it(monkeypatch, capsys):
    # The test decides which peer modules are "installed", whatever this machine has:
    # stable_baselines3 present, tianshou and sb3_contrib absent.
    installed = {"stable_baselines3"}
    peer_modules = {m for modules in peers.PEER_MODULES.values() for m in modules}
    real = peers.find_spec
    monkeypatch.setattr(peers, "find_spec", lambda name: (
        (object() if name in installed else None) if name in peer_modules else real(name)))
    assert peers.main(["--seeds", "0"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "pip install -e '.[bench]'" in err[0]
    assert peers.missing_modules(["sb3_qrdqn"]) == ["sb3_contrib"]
    assert peers.missing_modules(["tianshou_c51", "sb3_qrdqn"]) == ["sb3_contrib", "tianshou"]
    assert peers.missing_modules([]) == []  # only our agents: nothing to install


def test_dry_run_prints_every_command_round_robin(capsys):
    assert peers.main(["--dry-run", "--seeds", "3", "4", "--agents", "c51", "--peers",
                       "tianshou_c51", "sb3_qrdqn", "--overrides", "learning.lr=3e-3"]) == 0
    lines = capsys.readouterr().out.strip().splitlines()
    assert len(lines) == 6 and all("OMP_NUM_THREADS=1" in line for line in lines)
    assert ("train.py experiment=cartpole_fast_c51 alpha=1 seed=3 "
            "trainer.stop_at_return=475") in lines[0] and lines[0].endswith("learning.lr=3e-3")
    assert "--worker tianshou_c51 --seeds 3" in lines[1] and "--worker sb3_qrdqn" in lines[2]
    # The second seed starts one library later.
    assert "--worker tianshou_c51 --seeds 4" in lines[3] and "experiment=cartpole_fast_c51" in lines[5]


def test_reach_from_history_takes_the_first_evaluation_at_the_target_within_the_caps():
    history = [{"env_steps": 4000, "train_seconds": 8.0, "expectation": 480.0},
               {"env_steps": 2000, "train_seconds": 4.0, "expectation": 120.0}]
    assert peers.reach_from_history(history, 475, 100_000, 600) == {
        "reached": True, "train_seconds": 8.0, "env_steps": 4000}
    # Past the step cap: not reached, reported at the last evaluation within it.
    assert peers.reach_from_history(history, 475, 3000, 600) == {
        "reached": False, "train_seconds": None, "env_steps": 2000, "seconds_trained": 4.0}
    # Past the time cap before any evaluation within it.
    assert peers.reach_from_history(history, 475, 100_000, 1.0)["env_steps"] == 2000
    assert not peers.past_caps(history[1:], 475, 100_000, 600)
    assert peers.past_caps(history, 475, 100_000, 600)


def test_median_ratio_and_table_on_made_up_runs():
    assert peers.median_seconds([30.0, None, 10.0]) == 30.0
    assert peers.median_seconds([30.0, 10.0, 20.0, 50.0]) == 25.0
    assert math.isinf(peers.median_seconds([None, None, 5.0]))
    assert math.isinf(peers.median_seconds([None, 5.0]))
    assert peers.ratio(20.0, 10.0) == 2.0
    assert peers.ratio(10.0, math.inf) is None and math.isinf(peers.ratio(math.inf, 4.0))

    def run(entry, seed, seconds, steps=20_000):
        reached = seconds is not None
        return {"entry": entry, "seed": seed, "reached": reached, "train_seconds": seconds,
                "env_steps": steps, **({} if reached else {"seconds_trained": 99.5})}

    runs = [run("ours_c51", 0, 12.0), run("ours_c51", 1, 18.0), run("ours_c51", 2, 15.0),
            run("ours_iqn", 0, 40.0), run("ours_iqn", 1, None, 100_000), run("ours_iqn", 2, 30.0),
            run("tianshou_c51", 0, 10.0), run("tianshou_c51", 1, 12.0),
            run("tianshou_c51", 2, 11.0)]
    summary = peers.summarize(runs)
    assert summary["medians"] == {"ours_c51": 15.0, "ours_iqn": 40.0, "tianshou_c51": 11.0}
    assert summary["ratios"]["ours_c51"]["tianshou_c51"] == pytest.approx(15 / 11)
    targets = {t["target"]: t for t in summary["targets"]}
    assert targets["best distributional"]["entry"] == "ours_c51"
    assert not targets["best distributional"]["met"] and targets["c51"]["met"]
    assert not targets["iqn"]["met"]  # 40 / 11 > 1.5
    assert summary["every_seed_reached"] == {"ours_c51": True, "ours_iqn": False}
    table = peers.markdown(runs, summary)
    assert "| ours_c51 | 12.0 s (20,000 steps) | 18.0 s (20,000 steps) | 15.0 s (20,000 steps) | 15.0 s |" in table
    assert "not reached (100,000 env steps, 99.5 s)" in table
    assert "| ours_c51 | 1.36x |" in table and "| ours_iqn | 3.64x |" in table
    assert "| best distributional | ours_c51 | 1.36x | 1.0x | MISSED |" in table
    assert "ours_iqn NO" in table


def test_a_peer_not_reached_gives_a_lower_bound_and_our_ratio_an_upper_one():
    runs = [{"entry": "ours_c51", "seed": s, "reached": True, "train_seconds": t,
             "env_steps": 20_000} for s, t in ((0, 12.0), (1, 18.0), (2, 15.0))]
    runs += [{"entry": "tianshou_c51", "seed": 0, "reached": True, "train_seconds": 40.0,
              "env_steps": 50_000},
             {"entry": "tianshou_c51", "seed": 1, "reached": False, "train_seconds": None,
              "env_steps": 98_000, "seconds_trained": 80.0},
             {"entry": "tianshou_c51", "seed": 2, "reached": False, "train_seconds": None,
              "env_steps": 98_000, "seconds_trained": 70.0}]
    # The true median is past 70 s (seed 2 would have needed more than its 70 s).
    assert peers.median_lower_bound(r for r in runs if r["entry"] == "tianshou_c51") == 70.0
    summary = peers.summarize(runs)
    assert math.isinf(summary["medians"]["tianshou_c51"])
    assert summary["ratios"]["ours_c51"]["tianshou_c51"] == pytest.approx(15 / 70)
    assert summary["ratio_is_upper_bound"]["ours_c51"]["tianshou_c51"]
    targets = {t["target"]: t for t in summary["targets"]}
    assert targets["c51"]["met"] and targets["c51"]["upper_bound"]
    table = peers.markdown(runs, summary)
    assert "| not reached (> 70.0 s) |" in table and "| ours_c51 | < 0.21x |" in table
    assert "| c51 | ours_c51 | < 0.21x | 1.5x | met |" in table
    # A failed run bounds nothing: it counts at 0 s.
    failed = [dict(runs[-1], error="boom", seconds_trained=None)]
    assert peers.median_lower_bound(failed) == 0.0


def test_published_criterion_is_passed_to_tianshou_workers_and_refused_for_sb3(capsys):
    assert peers.main(["--dry-run", "--seeds", "0", "--agents", "--peers", "tianshou_iqn",
                       "--peer-criterion", "published"]) == 0
    line = capsys.readouterr().out.strip()
    assert "--worker tianshou_iqn" in line and line.endswith("--peer-criterion published")
    # The worker line itself is accepted (its --peers default names every peer).
    assert peers.parse_args(peers.peer_command("tianshou_iqn", 0, peers.parse_args(
        ["--peers", "tianshou_iqn", "--peer-criterion", "published"]))[2:]).worker == "tianshou_iqn"
    with pytest.raises(SystemExit) as refused:
        peers.main(["--dry-run", "--peers", "sb3_qrdqn", "--peer-criterion", "published"])
    assert refused.value.code == 2
    for name in ("tianshou_c51", "tianshou_iqn"):  # the scripts' own test, as published
        settings = peers.TIANSHOU[name]
        assert (settings["eps_test"], settings["num_test_envs"],
                settings["reward_threshold"]) == (0.05, 100, 195.0)


@pytest.mark.parametrize("agent", peers.OUR_AGENTS)
def test_each_agent_has_a_cartpole_preset_on_top_of_the_common_one(compose, agent):
    from rs_lightning.config.schema import validate

    train = validate(compose([f"experiment=cartpole_fast_{agent}"])).train
    common = validate(compose(["experiment=cartpole_fast", f"agent={agent}"])).train
    assert train.agent["name"] == agent and train.env.id == "CartPole-v1"
    # The loop is the common one; an agent's own file changes its network, its horizon and
    # its update ratio, and keeps the benchmark's cap and evaluation period in transitions.
    assert train.env.num_envs == common.env.num_envs == 8
    assert dataclasses.replace(train.learning, updates_per_step=common.learning.updates_per_step) == common.learning

    def transitions(updates):
        return updates / train.learning.updates_per_step

    assert transitions(train.trainer.max_steps) == 100_000
    assert transitions(train.evaluation.every_n_steps) == 2_000


def test_merge_tables_benchmarks_saved_side_by_side(tmp_path, capsys):
    def saved(seed, seconds):
        return {"command": f"python benchmarks/peers.py --seeds {seed}", "complete": True,
                "started": "now", "machine": {"load_before": [1.0, 1.0, 1.0]},
                "runs": [{"entry": "ours_c51", "seed": seed, "reached": True,
                          "train_seconds": seconds, "env_steps": 20_000},
                         {"entry": "tianshou_c51", "seed": seed, "reached": True,
                          "train_seconds": 2 * seconds, "env_steps": 30_000}]}

    paths = []
    for seed, seconds in ((0, 10.0), (1, 30.0), (2, 20.0)):
        paths.append(tmp_path / f"seed{seed}.json")
        paths[-1].write_text(peers.json.dumps(saved(seed, seconds)))
    out = tmp_path / "all.json"
    assert peers.main(["--merge", *map(str, paths), "--out", str(out)]) == 0
    table = capsys.readouterr().out
    assert "| ours_c51 | 10.0 s (20,000 steps) | 30.0 s (20,000 steps) | 20.0 s (20,000 steps) | 20.0 s |" in table
    merged = peers.json.loads(out.read_text())
    assert merged["medians"] == {"ours_c51": 20.0, "tianshou_c51": 40.0} and len(merged["runs"]) == 6


def test_targets_are_undecided_when_the_seeds_differ():
    runs = [{"entry": "ours_c51", "seed": s, "reached": True, "train_seconds": 10.0,
             "env_steps": 20_000} for s in (0, 1)]
    runs.append({"entry": "tianshou_c51", "seed": 0, "reached": True, "train_seconds": 50.0,
                 "env_steps": 50_000})
    check = peers.summarize(runs)["targets"][1]
    assert check["target"] == "c51" and check["ratio"] == 0.2 and not check["met"]
    assert "| c51 | ours_c51 | 0.20x | 1.5x | undecided (not the same seeds) |" in peers.markdown(
        runs, peers.summarize(runs))
