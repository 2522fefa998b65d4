"""benchmarks/peers.py without running a benchmark: the missing extra answered with the
install line (exit 2), the dry run's commands, and the scoring functions on made-up runs."""

from __future__ import annotations

import dataclasses
import importlib.util
import math
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
_spec = importlib.util.spec_from_file_location("peers", ROOT / "benchmarks" / "peers.py")
peers = importlib.util.module_from_spec(_spec)
sys.modules["peers"] = peers  # its dataclasses look their module up while it loads
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
    assert "--worker tianshou_iqn" in line and "--peer-criterion published" in line
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


def test_pendulum_world_runs_the_actor_critics_against_sb3_with_its_own_test(capsys):
    assert peers.main(["--world", "pendulum", "--dry-run", "--seeds", "0"]) == 0
    lines = capsys.readouterr().out.strip().splitlines()
    assert len(lines) == 4
    # Past the preset's 6,000 steps: a run stops at the threshold or the cap on steps.
    assert ("train.py experiment=pendulum agent=tqc trainer.max_steps=20000 alpha=1 seed=0 "
            "trainer.stop_at_return=-200 ") in lines[0]
    assert "experiment=pendulum agent=dsac" in lines[1]
    assert "--worker sb3_sac --seeds 0 --max-env-steps 20000" in lines[2]
    assert "--eval-every 500 --threshold -200.0" in lines[2] and "--worker sb3_tqc" in lines[3]
    assert all(line.endswith("--world pendulum") for line in lines[2:])
    # An agent or a peer of another world: one line naming the allowed ones (exit 2).
    for option, value, allowed in (("--agents", "c51", "tqc dsac"),
                                   ("--peers", "tianshou_c51", "sb3_sac sb3_tqc")):
        with pytest.raises(SystemExit) as refused:
            peers.main(["--world", "pendulum", "--dry-run", option, value])
        assert refused.value.code == 2
        err = capsys.readouterr().err.strip().splitlines()[-1]
        assert f"{option} {value}: not on --world pendulum; choose from {allowed}" in err


def test_preset_replaces_the_worlds_experiment_for_our_runs_only(capsys):
    """--preset <name>: our runs train with experiment=<name> in place of the world's preset,
    the rest of their command and the peers' commands as they are."""
    assert peers.main(["--world", "pendulum", "--dry-run", "--seeds", "0", "--agents", "dsac",
                       "--peers", "sb3_sac", "--preset", "my_pendulum"]) == 0
    ours, peer = capsys.readouterr().out.strip().splitlines()
    assert "train.py experiment=my_pendulum agent=dsac trainer.max_steps=20000 alpha=1" in ours
    assert "experiment=" not in peer and "--worker sb3_sac" in peer


def test_peer_hidden_sizes_reach_the_actor_critic_peers_only(capsys):
    """--peer-hidden-sizes: the SB3 actor-critics at a preset's widths (their worker gets the
    widths); any other peer is refused in one line."""
    assert peers.main(["--world", "pendulum", "--dry-run", "--seeds", "0", "--agents",
                       "--peers", "sb3_sac", "--peer-hidden-sizes", "128", "128"]) == 0
    (line,) = capsys.readouterr().out.strip().splitlines()
    assert "--worker sb3_sac" in line and line.endswith("--peer-hidden-sizes 128 128")
    worker = peers.parse_args(line.split("peers.py ", 1)[1].split())
    assert peers.actor_critic_settings("sb3_sac", worker) == {
        "learning_rate": 1e-3, "policy_kwargs": {"net_arch": [128, 128]}}  # the zoo's kept
    assert peers.actor_critic_settings("sb3_sac", peers.parse_args(["--world", "pendulum"])) == {
        "learning_rate": 1e-3}
    with pytest.raises(SystemExit) as refused:
        peers.main(["--dry-run", "--peers", "sb3_qrdqn", "--peer-hidden-sizes", "64"])
    assert refused.value.code == 2
    assert "--peer-hidden-sizes: only the actor-critic peers" in capsys.readouterr().err


def test_without_a_reference_peer_the_targets_are_against_the_fastest_peer():
    world = peers.WORLDS["pendulum"]
    runs = [{"entry": e, "seed": s, "reached": True, "train_seconds": t, "env_steps": 3000}
            for e, times in (("ours_tqc", (30.0, 50.0, 40.0)), ("ours_dsac", (45.0, 45.0, 45.0)),
                             ("sb3_sac", (36.0, 38.0, 35.0)), ("sb3_tqc", (70.0, 80.0, 66.0)))
            for s, t in enumerate(times)]
    summary = peers.summarize(runs, world)
    (check,) = summary["targets"]
    assert (check["target"], check["entry"], check["peer"]) == ("best distributional",
                                                                 "ours_tqc", "sb3_sac")
    assert check["ratio"] == pytest.approx(40 / 36) and not check["met"]
    assert "| best distributional | ours_tqc | 1.11x | 0.8x | MISSED |" in peers.markdown(runs, summary)
    # A peer that never reached is no reference while another one did.
    slow = [dict(r, reached=False, train_seconds=None, seconds_trained=500.0)
            if r["entry"] == "sb3_sac" else r for r in runs]
    assert peers.summarize(slow, world)["targets"][0]["peer"] == "sb3_tqc"


def test_budget_world_scores_updates_per_second_between_the_last_two_evaluations(capsys):
    world = peers.WORLDS["half_cheetah"]
    assert peers.main(["--world", "half_cheetah", "--dry-run", "--seeds", "2", "--agents",
                       "tqc", "--peers", "sb3_tqc", "--max-env-steps", "40000"]) == 0
    ours, peer = capsys.readouterr().out.strip().splitlines()
    # 40,000 transitions: 10,000 uniform ones, then 30,000 updates, evaluated every 5,000.
    assert ("experiment=half_cheetah agent=tqc alpha=1 seed=2 trainer.max_steps=30000 "
            "evaluation.every_n_steps=5000 ") in ours and "stop_at_return" not in ours
    assert "--worker sb3_tqc --seeds 2 --max-env-steps 40000" in peer
    assert peer.endswith("--world half_cheetah")

    def evaluations(seconds, final_return):
        return [{"env_steps": 10_000 * (i + 1), "train_seconds": t, "expectation": r}
                for i, (t, r) in enumerate(zip(seconds, (-300.0, 500.0, final_return)))]

    assert peers.budget_score(evaluations((1.0, 101.0, 201.0), 1500.0), 30_000) == {
        "complete": True, "updates_per_second": 100.0, "final_return": 1500.0,
        "env_steps": 30_000}
    # Stopped by the time cap before the budget: not complete, no score in the medians.
    assert not peers.budget_score(evaluations((1.0, 101.0, 201.0), 0.0)[:2], 30_000)["complete"]
    runs = [{"entry": "ours_tqc", "seed": 0, "evaluations": evaluations((1, 51, 101), 2000.0)},
            {"entry": "ours_tqc", "seed": 1, "evaluations": evaluations((1, 41, 81), 1000.0)},
            {"entry": "sb3_tqc", "seed": 0, "evaluations": evaluations((2, 102, 202), 1800.0)},
            {"entry": "sb3_tqc", "seed": 1, "evaluations": evaluations((2, 202, 402), 1600.0)}]
    summary = peers.summarize_budget(runs, world, 30_000)
    assert summary["updates_per_second"] == {"ours_tqc": 225.0, "sb3_tqc": 75.0}
    assert summary["final_return_mean"] == {"ours_tqc": 1500.0, "sb3_tqc": 1700.0}
    (check,) = summary["targets"]
    assert check["ratio"] == pytest.approx(3.0) and check["met"]
    table = peers.markdown_budget(runs, summary)
    assert "| ours_tqc | 200.0/s, return 2000 | 250.0/s, return 1000 | 225.0 | 1500 |" in table
    assert "| tqc | ours_tqc | 3.00x | 1.0x | met |" in table
    # A failed peer run leaves its median to the rest and the target undecided.
    runs[3] = dict(runs[3], error="boom")
    undecided = peers.summarize_budget(runs, world, 30_000)
    assert undecided["updates_per_second"]["sb3_tqc"] == 100.0
    assert not undecided["targets"][0]["met"] and "| sb3_tqc | 100.0/s, return 1800 | failed |" in \
        peers.markdown_budget(runs, undecided)


@pytest.mark.parametrize("world", ["pendulum", "half_cheetah"])
@pytest.mark.parametrize("agent", ["tqc", "dsac"])
def test_continuous_presets_have_the_peers_settings(compose, world, agent):
    """Equal networks and equal work per update: what the peers' rows are compared on."""
    from rs_lightning.config.schema import validate

    bench = peers.WORLDS[world]
    train = validate(compose([o.format(agent=agent, max_env_steps=bench.max_env_steps)
                              for o in bench.preset])).train
    # The peers' own settings over SB3's defaults (a learning rate of 3e-4, 100 warm-up steps).
    zoo = {"learning_rate": 3e-4, "learning_starts": 100, **peers.SB3_ZOO[world]["sb3_tqc"]}
    assert train.env.id == bench.env_id and train.agent["name"] == agent
    assert train.learning.lr == zoo["learning_rate"]
    assert train.learning.warmup_steps == zoo["learning_starts"]
    assert (train.learning.batch_size, train.learning.target_update_rate) == (256, 0.005)
    assert train.agent["hidden_sizes"] == [256, 256] and train.agent["n_critics"] == 2
    assert peers.SB3_ZOO[world]["sb3_sac"] == peers.SB3_ZOO[world]["sb3_tqc"]
    if bench.score == "budget":
        assert bench.warmup_steps == train.learning.warmup_steps
        assert bench.max_env_steps - bench.warmup_steps == train.trainer.max_steps
        assert train.evaluation.every_n_steps == bench.eval_every
    else:
        assert train.evaluation.every_n_steps == bench.eval_every
        assert train.evaluation.episodes_during_training == bench.episodes


def test_merge_refuses_files_of_different_worlds(tmp_path, capsys):
    paths = []
    for world in ("cartpole", "pendulum"):
        paths.append(tmp_path / f"{world}.json")
        paths[-1].write_text(peers.json.dumps({"world": world, "runs": []}))
    assert peers.main(["--merge", *map(str, paths)]) == 2
    assert "different worlds (cartpole, pendulum)" in capsys.readouterr().err


def test_a_terminated_benchmark_stops_the_run_in_progress(tmp_path):
    """SIGTERM to a benchmark ends its current run's process too, not only itself."""
    import os
    import signal
    import subprocess
    import sys
    import time

    pid_file = tmp_path / "worker.pid"
    script = f"""
import importlib.util, sys
spec = importlib.util.spec_from_file_location("peers", {str(ROOT / "benchmarks" / "peers.py")!r})
peers = importlib.util.module_from_spec(spec)
sys.modules["peers"] = peers
spec.loader.exec_module(peers)
peers.missing_modules = lambda _: []
peers.peer_command = lambda *_: [sys.executable, "-c",
    "import os, time; open({str(pid_file)!r}, 'w').write(str(os.getpid())); time.sleep(120)"]
peers.main(["--world", "pendulum", "--agents", "--peers", "sb3_sac", "--seeds", "0"])
"""
    benchmark = subprocess.Popen([sys.executable, "-c", script], cwd=ROOT)
    deadline = time.monotonic() + 60
    while not (pid_file.is_file() and pid_file.read_text()) and time.monotonic() < deadline:
        time.sleep(0.1)
    worker = int(pid_file.read_text())
    benchmark.send_signal(signal.SIGTERM)
    assert benchmark.wait(timeout=30) == 128 + signal.SIGTERM
    time.sleep(0.5)
    with pytest.raises(ProcessLookupError):  # reaped by the benchmark before it exited
        os.kill(worker, 0)


def test_a_peer_plays_the_very_episodes_our_evaluation_plays(compose):
    """The SB3 peers' evaluation (greedy_returns on episode_seeds) and our periodic one start
    from the same states: a fixed policy (a constant torque on Pendulum, whose start is all
    that varies) gets the same ten returns from both, and the same again at a later
    evaluation (the starts do not move on)."""
    import gymnasium as gym
    import numpy as np
    import torch

    from rs_lightning.analysis.evaluation import episode_seeds, play_episodes, rollout_policy
    from rs_lightning.config.schema import validate
    from rs_lightning.risk import Utility

    env_config = validate(compose(["experiment=pendulum", "agent=tqc"])).train.env
    torque = 0.5  # of the [-1, 1] box ours acts in: 1.0 N m on Pendulum's [-2, 2]
    ours = play_episodes(rollout_policy(lambda rows: torch.full((len(rows), 1), torque),
                                        Utility(1.0, "expectation")),
                         env_config, episodes=10, seed=3, batch_envs=10).returns
    env = gym.make("Pendulum-v1")
    starts = episode_seeds(3, 10)
    theirs = [peers.greedy_returns(lambda obs: np.array([2.0 * torque], dtype=np.float32), env,
                                   starts) for _ in range(2)]
    np.testing.assert_allclose(theirs[0], ours, rtol=1e-5)
    assert theirs[1] == theirs[0] and len(set(np.round(ours, 3))) == 10
