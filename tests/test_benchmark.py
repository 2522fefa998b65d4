"""The benchmark suite: the scores against the exact references, their statistics, the
command line that launches the sweep, and one tiny benchmark end to end."""

from __future__ import annotations

import json

import numpy as np
import pytest
import yaml

from rs_lightning.analysis import benchmark
from rs_lightning.analysis.benchmark import (
    RunScore,
    normalised_score,
    score_run,
    summarize,
    write_leaderboard,
)
from rs_lightning.analysis.stats import RANGE_METHOD, interquartile_mean, stratified_estimate
from rs_lightning.app.commands import benchmark as command

WORLDS = benchmark.world_names()  # conf/env's names, by id and by id and keyword arguments


def config(objective="per_decision", agent="c51", risk="cvar", seed=0):
    return {"agent": {"name": agent}, "risk": {"name": risk, "rho": 0.1}, "alpha": 0.5,
            "objective": objective, "seed": seed,
            "env": {"id": "rs_lightning/TwoStage-v0", "gamma": 0.9, "grid_size": 3,
                    "kwargs": {"max_steps": 10, "timeout_is_terminal": True}}}


def test_a_known_gap_gives_a_known_score():
    # per_decision: U of the greedy policy against the fixed point's, random at -3
    row = {"job": "0/seed_0", "seed": 0, "exact_static_utility": -1.5,
           "per_decision_static_utility": -1.0}
    run = score_run(row, config(), random=-3.0, worlds=WORLDS)
    assert run.world == "two_stage" and run.method == ("c51", "cvar(rho=0.1) a=0.5", "per_decision")
    assert run.gap == pytest.approx(0.5)
    assert run.score == pytest.approx(0.75)  # (-1.5 + 3) / (-1 + 3)
    # static: the Monte Carlo U against the static optimum
    row = {"job": "1/seed_0", "mc_static_utility": -2.0, "mc_static_utility_stderr": 0.01,
           "static_optimum": -1.0}
    run = score_run(row, config("static"), random=-3.0, worlds=WORLDS)
    assert run.score == pytest.approx(0.5) and run.utility_stderr == 0.01
    assert normalised_score(-3.0, -1.0, -3.0) == 0.0 and normalised_score(-1.0, -1.0, -3.0) == 1.0


def test_a_target_known_to_an_interval_gives_the_interval_of_the_score():
    """U* in [-1, -0.5] (a policy attains -1), U_rand exact -3, U = -2 exact: the score
    lies in [(−2 + 3) / (−0.5 + 3), (−2 + 3) / (−1 + 3)] = [0.4, 0.5]; an estimate without an
    error bound has no interval, and the leaderboard says which figure is which."""
    row = {"job": "1/seed_0", "exact_static_utility": -2.0, "exact_static_utility_kind": "exact",
           "per_decision_static_utility": -1.0, "per_decision_static_utility_kind": "interval",
           "per_decision_static_utility_upper": -0.5}
    run = score_run(row, config(), random=-3.0, worlds=WORLDS)
    assert run.score == pytest.approx(0.5) and not run.exact
    assert run.score_interval == pytest.approx((0.4, 0.5))
    # U_rand an estimate within 0.5: the worst corners move both ends
    rough = score_run(row, config(), -3.0, WORLDS, random_reference=(-3.5, -2.5, "estimate"))
    low, high = rough.score_interval
    assert low == pytest.approx(0.5 / 2.0) and high == pytest.approx(1.5 / 2.5)
    unbounded = dict(row, exact_static_utility_kind="estimate")
    assert score_run(unbounded, config(), -3.0, WORLDS).score_interval is None
    exact = dict(row, per_decision_static_utility_kind="exact")
    exact_run = score_run(exact, config(), -3.0, WORLDS)
    assert exact_run.exact and exact_run.score_interval == pytest.approx((0.5, 0.5))
    summary, = summarize([run, exact_run])
    assert summary.world_bounds["two_stage"][0] < summary.world_bounds["two_stage"][1]
    markdown = benchmark.to_markdown([summary], [run], [])
    assert "interval: [-1, -0.5]" in markdown and "-3 (exact)" in markdown


def test_runs_without_references_say_why():
    assert "no per_decision_static_utility" in score_run(
        {"job": "j", "exact_static_utility": 1.0}, config(), -3.0, WORLDS)
    assert "no exact references" in score_run(
        {"job": "j", "exact_static_utility": 1.0, "per_decision_static_utility": 1.0},
        config(), None, WORLDS)
    assert "ranks nothing" in score_run(  # a target no better than the random policy
        {"job": "j", "exact_static_utility": 1.0, "per_decision_static_utility": -3.0},
        config(), -3.0, WORLDS)


def _runs(scores_by_world: dict[str, list[float]], objective="per_decision"):
    # U* = 1, U_rand = 0: the score is U
    return [RunScore(f"{w}/{s}", w, "c51", "cvar", objective, s, u, 1.0, 0.0, None)
            for w, values in scores_by_world.items() for s, u in enumerate(values)]


def test_the_iqm_of_known_numbers_and_the_range_below_five_seeds():
    summary, = summarize(_runs({"a": [0.0, 0.2, 0.4], "b": [0.6, 0.8, 1.0]}))
    # 6 runs pooled: floor(6 / 4) = 1 cut from each end -> mean of 0.2 .. 0.8
    assert summary.estimate.iqm == pytest.approx(0.5)
    assert summary.estimate.method == RANGE_METHOD
    # no interval below 5 seeds: the lowest and the highest run
    assert (summary.estimate.low, summary.estimate.high) == (0.0, 1.0)
    assert summary.interval_label.startswith("range of the runs: 3 seeds x 2 worlds")
    assert "95%" not in summary.interval_label and "CI below 5 seeds" in summary.interval_label
    assert interquartile_mean([1, 2, 3, 4, 100, -100, 5, 6]) == pytest.approx(3.5)


def test_five_seeds_give_a_stratified_bootstrap_interval():
    rng = np.random.default_rng(0)
    tasks = [rng.normal(0.5, 0.1, 5), rng.normal(0.8, 0.1, 5)]
    estimate = stratified_estimate(tasks, use_rliable=False)
    assert estimate.method != RANGE_METHOD
    assert estimate.low <= estimate.iqm <= estimate.high
    summary, = summarize(_runs({"a": list(tasks[0]), "b": list(tasks[1])}))
    assert summary.interval_label.startswith("95% CI")


def test_rliable_and_numpy_give_the_same_stratified_interval():
    pytest.importorskip("rliable", reason="the stats extra (pip install -e '.[stats]')")
    rng = np.random.default_rng(1)
    tasks = [rng.normal(0.8, 0.1, 5), rng.normal(0.5, 0.2, 5), rng.normal(0.9, 0.05, 5)]
    ours = stratified_estimate(tasks, use_rliable=False)
    theirs = stratified_estimate(tasks, use_rliable=True)
    assert "rliable" in theirs.method and "rliable" not in ours.method
    assert theirs.iqm == ours.iqm
    # two bootstraps of 2,000 resamples: the same interval up to their Monte Carlo error
    assert theirs.low == pytest.approx(ours.low, abs=0.01)
    assert theirs.high == pytest.approx(ours.high, abs=0.01)


def _write_run(folder, config_, summary):
    folder.mkdir(parents=True)
    (folder / "config.yaml").write_text(yaml.safe_dump(config_))
    (folder / "eval.json").write_text(json.dumps(summary))


def test_the_leaderboard_files_from_eval_json_fixtures(tmp_path, monkeypatch):
    monkeypatch.setattr(benchmark.RandomReferences, "__call__", lambda self, config: -3.0)
    for job, (agent, utilities) in enumerate([("c51", [-1.0, -1.5]), ("dqn", [-2.0, -2.5])]):
        for seed, u in enumerate(utilities):
            _write_run(tmp_path / f"{job}_agent={agent}" / f"seed_{seed}",
                       config(agent=agent, seed=seed),
                       {"expectation": 0.0, "seed": seed, "exact_static_utility": u,
                        "per_decision_static_utility": -1.0})
    markdown = write_leaderboard(tmp_path)
    for name in benchmark.FILES:
        assert (tmp_path / name).is_file()
    rows = (tmp_path / "leaderboard.csv").read_text().splitlines()
    assert rows[1].startswith("1,c51,") and rows[2].startswith("2,dqn,")
    assert "| 1 | c51 |" in markdown and "range of the runs: 2 seeds x 1 world " in markdown
    # c51: scores 1 and 0.75, IQM (no cut below 4 runs) 0.875
    assert "0.875" in markdown


# ----------------------------------------------------------------------------- the command
def _args(*argv):
    return command.train_command(command.parser().parse_args(list(argv)))


def test_the_flags_become_the_overrides_of_one_multirun():
    line = _args("--agents", "c51,dqn", "--worlds", "two_stage", "--measures", "var",
                 "--objectives", "static", "--seeds", "2", "--out", "/tmp/x",
                 "hydra/launcher=joblib")
    # the installed command, whichever folder the benchmark runs in
    assert line[1:5] == ["-m", "rs_lightning", "train", "-m"]
    assert line[5:] == ["experiment=benchmark_small", "env=two_stage", "agent=c51,dqn",
                        "risk=var", "objective=static", "parallel_seeds=2",
                        "hydra.sweep.dir=/tmp/x", "hydra/launcher=joblib"]
    # left out, every flag takes the preset's value
    preset = command.read_preset("small")
    default = _args()
    assert f"env={preset['hydra']['sweeper']['params']['env']}" in default
    assert f"parallel_seeds={preset['parallel_seeds']}" in default
    assert f"hydra.sweep.dir={preset['hydra']['sweep']['dir']}" in default


def _sweep_jobs(sweep: list[str]) -> list[list[str]]:
    """The jobs the suite's sweeper launches for these sweep overrides. Imported here, not
    at the top: Hydra's plugin discovery imports hydra_plugins itself, and a second import
    of the sweeper's module would give it another BasicSweeper class."""
    from hydra.core.override_parser.overrides_parser import OverridesParser
    from hydra_plugins.rs_lightning_sweepers.valid_pairs_sweeper import ValidPairsSweeper

    overrides = OverridesParser.create().parse_overrides(sweep)
    return [job for batch in ValidPairsSweeper(max_batch_size=None).split_arguments(overrides, None)
            for job in batch]


def _preset_jobs(preset: str, *overrides: str) -> list[list[str]]:
    """The jobs ``rs-lightning benchmark --preset <preset>`` launches, in their order: its
    sweeper given Hydra's context, as in the sweep itself."""
    from hydra import compose, initialize_config_dir

    import rs_lightning.app.run_names  # noqa: F401  (the folder names' resolvers)
    from rs_lightning.app.hydra_callbacks import grid_jobs
    from tests.conftest import CONF

    with initialize_config_dir(config_dir=str(CONF), version_base="1.3"):
        config = compose("train", [f"experiment=benchmark_{preset}", *overrides],
                         return_hydra_config=True)
        config.hydra.overrides.task = [f"experiment=benchmark_{preset}", *overrides]
        jobs, _ = grid_jobs(config)
    return jobs


def test_ppo_joins_the_presets_after_the_jobs_they_had_with_its_own_settings():
    """The small preset's 70 value-based jobs keep their order, numbers and folders; PPO's 14
    (static objective: per_decision under a risk is refused) run after them, each composed
    with PPO's settings (conf/experiment_agent/benchmark_small/ppo.yaml)."""
    from hydra import compose, initialize_config_dir

    from tests.conftest import CONF

    jobs = _preset_jobs("small")
    assert len(jobs) == 84
    value_based = _sweep_jobs(["env=" + command.read_preset("small")["hydra"]["sweeper"]
                               ["params"]["env"], "agent=dqn,c51,qr_dqn", "risk=cvar,var",
                               "objective=per_decision,static"])
    assert len(value_based) == 70
    assert [sorted(o for o in job if not o.startswith("experiment=")) for job in jobs[:70]] \
        == [sorted(job) for job in value_based]
    assert all("agent=ppo" in job and "objective=static" in job for job in jobs[70:])
    with initialize_config_dir(config_dir=str(CONF), version_base="1.3"):
        ppo = compose("train", ["experiment=benchmark_small", *jobs[70]])
        c51 = compose("train", ["experiment=benchmark_small", *jobs[1]])
        alone = compose("train", ["agent=ppo"])
    assert ppo.agent.name == "ppo" and c51.agent.name != "ppo"
    assert (ppo.learning.lr, ppo.env.num_envs, ppo.trainer.max_steps) == (0.003, 8, 4000)
    assert (c51.learning.lr, c51.env.num_envs, c51.trainer.max_steps) == (1e-4, 1, 3000)
    assert (alone.learning.lr, alone.env.num_envs) == (1e-4, 1)  # outside the presets


def test_the_full_preset_is_the_small_suite_with_more_methods_seeds_and_updates():
    """Both presets hold the suite's worlds; the full one gives every leaderboard interval
    5 seeds (a bootstrap interval, not a range) and every measure with exact references."""
    small, full = command.read_preset("small"), command.read_preset("full")
    assert command.presets() == ["full", "small"]
    params = full["hydra"]["sweeper"]["params"]
    assert params["env"] == small["hydra"]["sweeper"]["params"]["env"]
    allowed = command.allowed_values(full)
    assert sorted(command._names(params["risk"])) == allowed["--measures"]
    assert set(command._names(params["agent"])) > set(command._names(
        small["hydra"]["sweeper"]["params"]["agent"]))
    assert full["parallel_seeds"] >= 5 and full["trainer"]["max_steps"] > small["trainer"]["max_steps"]
    assert full["hydra"]["sweep"]["dir"] != small["hydra"]["sweep"]["dir"]
    jobs = _preset_jobs("full")
    # dqn: per_decision alone; c51, qr_dqn, iqn: both; ppo: static alone; 3 measures
    assert len(jobs) == 7 * (3 + 3 * 2 * 3 + 3) == 168
    line = _args("--preset", "full")
    assert "experiment=benchmark_full" in line and "parallel_seeds=5" in line
    assert "hydra.sweep.dir=outputs/benchmark/full" in line


@pytest.mark.parametrize("flag, value, allowed", [
    ("--worlds", "cartpole", "two_stage"), ("--agents", "tqc", "qr_dqn"),
    ("--measures", "wang", "cvar, spectral, var"), ("--objectives", "conditioned", "per_decision, static"),
    ("--preset", "huge", "small")])
def test_an_unknown_name_is_one_line_and_exit_2(capsys, flag, value, allowed):
    assert command.main([flag, value]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1
    assert err.startswith(f"error: {flag}: ") and repr(value) in err and allowed in err


def test_the_sweep_leaves_out_the_pairs_the_config_refuses():
    jobs = _sweep_jobs(["env=two_stage,cliff_walking", "agent=dqn,c51",
                        "objective=per_decision,static"])
    assert len(jobs) == 6  # 2 worlds x (dqn: per_decision; c51: both)
    assert not any("agent=dqn" in job and "objective=static" in job for job in jobs)


def test_in_a_sweep_the_rules_that_depend_on_the_risk_setting_apply_too():
    """With Hydra's context (as in ``python train.py -m``) each job is composed, so PPO's
    per_decision jobs are left out under a risk measure and kept at alpha 1."""
    from hydra import initialize_config_dir
    from hydra.core.global_hydra import GlobalHydra
    from hydra.core.override_parser.overrides_parser import OverridesParser
    from hydra.types import HydraContext, RunMode

    import rs_lightning.app.run_names  # noqa: F401  (the folder names' resolvers)
    from tests.conftest import CONF

    sweep = ["env=two_stage", "agent=ppo,c51", "objective=per_decision,static", "risk=cvar",
             "alpha=0.5,1.0"]
    with initialize_config_dir(config_dir=str(CONF), version_base="1.3"):
        # Imported once Hydra has discovered its plugins (see _sweep_jobs).
        from hydra_plugins.rs_lightning_sweepers.valid_pairs_sweeper import ValidPairsSweeper

        loader = GlobalHydra.instance().config_loader()
        sweeper = ValidPairsSweeper(max_batch_size=None)
        sweeper.hydra_context = HydraContext(config_loader=loader, callbacks=None)
        sweeper.config = loader.load_configuration("train", sweep, RunMode.MULTIRUN)
        overrides = OverridesParser.create().parse_overrides(sweep)
        jobs = [job for batch in sweeper.split_arguments(overrides, None) for job in batch]
    kept = {(job[1], job[2], job[4]) for job in jobs}
    assert ("agent=ppo", "objective=per_decision", "alpha=0.5") not in kept
    assert ("agent=ppo", "objective=per_decision", "alpha=1.0") in kept
    assert ("agent=ppo", "objective=static", "alpha=0.5") in kept
    assert len(jobs) == 7  # c51: 4; ppo: static at both, per_decision at alpha 1


def test_a_tiny_benchmark_end_to_end(tmp_path):
    # 1 agent, 1 measure, 1 objective, 1 world, 1 seed, a few hundred updates
    status = command.main(["--worlds", "two_stage", "--agents", "c51", "--measures", "cvar",
                           "--objectives", "per_decision", "--seeds", "1", "--out",
                           str(tmp_path), "trainer.max_steps=150", "evaluation.episodes=50",
                           "learning.target_update_period=50", "trainer.checkpoint_every_n_steps=0"])
    assert status == 0
    markdown = (tmp_path / "leaderboard.md").read_text()
    assert "| 1 | c51 | cvar(rho=0.1) a=0.5 | per_decision | 1 | 1 |" in markdown
    assert (tmp_path / "profiles.png").stat().st_size > 0
    # the same leaderboard in an offline W&B run: both tables and the profiles
    (wandb_run,) = (tmp_path / "wandb").glob("offline-run-*")
    media = wandb_run / "files" / "media"
    (leaderboard,) = media.glob("table/leaderboard_*.table.json")
    table = json.loads(leaderboard.read_text())
    assert table["columns"][:4] == ["rank", "agent", "measure", "objective"]
    assert [row[1:4] for row in table["data"]] == [["c51", "cvar(rho=0.1) a=0.5", "per_decision"]]
    assert len(list(media.glob("table/scores_*.table.json"))) == 1
    assert len(list(media.glob("images/profiles_*.png"))) == 1


# ----------------------------------------------------------------------------- the lower reference
def test_the_random_policy_reference_is_a_mixture_of_the_actions():
    from rs_lightning.references.exact import PAPER_PATHS, exact_return, uniform_random_policy

    # a policy of probability 1 on the deterministic policy's action is that policy
    path = PAPER_PATHS["risky_rewards"]["green"]
    sure = exact_return("risky_rewards", lambda cell: {path[cell]: 1.0}).mixture
    assert sure.mean() == pytest.approx(exact_return("risky_rewards", path).mixture.mean())
    # uniform: the first step's four actions weigh a quarter each
    random = exact_return("risky_rewards", uniform_random_policy(4)).mixture
    first = [exact_return("risky_rewards", uniform_random_policy(4), first_action=a).mixture
             for a in range(4)]
    assert random.mean() == pytest.approx(np.mean([law.mean() for law in first]))


def test_the_tabular_random_reference_averages_the_actions():
    from rs_lightning.references.tabular_references import (
        TabularModel,
        static_utility,
        uniform_random_utility,
    )
    from rs_lightning.risk import Utility

    # one state, two actions ending the episode with reward 0 or 1: the random policy's
    # return is 0 or 1 with probability 1/2 each
    model = TabularModel(probs=np.ones((1, 2, 1)), next_states=np.zeros((1, 2, 1), dtype=np.int64),
                         rewards=np.array([[[0.0], [1.0]]]), terminal=np.ones((1, 2, 1), bool),
                         start=np.ones(1), horizon=None)
    mean = Utility(1.0, "expectation", {})
    assert uniform_random_utility(model, mean, 0.9) == pytest.approx(0.5, abs=1e-3)
    assert static_utility(model, np.array([1]), mean, 0.9) == pytest.approx(1.0, abs=1e-3)


def windy_lander(agent="tqc", seed=0):
    return {"agent": {"name": agent}, "risk": {"name": "cvar", "rho": 0.1}, "alpha": 0.5,
            "objective": "per_decision", "seed": seed,
            "env": {"id": "LunarLander-v3", "gamma": 0.99, "grid_size": None,
                    "kwargs": {"continuous": True, "enable_wind": True, "wind_power": 15.0,
                               "turbulence_power": 1.5}}}


def test_worlds_without_references_get_a_monte_carlo_table(tmp_path, monkeypatch):
    """Runs on a world without exact references are not ranked: their U, E and R_rho go to
    a table of their own, per world and method, the IQM over seeds with the range below
    five seeds and a bootstrap interval from five on; monte_carlo.csv holds every run."""
    monkeypatch.setattr(benchmark.RandomReferences, "__call__", lambda self, config: (
        -3.0 if config["env"]["id"] == "rs_lightning/TwoStage-v0" else None))
    _write_run(tmp_path / "0_exact", config(), {
        "seed": 0, "expectation": 0.0, "utility": 0.0, "exact_static_utility": -1.0,
        "per_decision_static_utility": -1.0})
    utilities = {"tqc": [-60.0, -20.0, 10.0], "dsac": [50.0, 70.0, 80.0, 90.0, 120.0]}
    for job, (agent, values) in enumerate(utilities.items(), 1):
        for seed, u in enumerate(values):
            _write_run(tmp_path / f"{job}_agent={agent}" / f"seed_{seed}", windy_lander(agent, seed),
                       {"seed": seed, "episodes": 100, "utility": u, "expectation": u + 40.0,
                        "risk_value": u - 40.0, "expectation_stderr": 3.0})
    markdown = write_leaderboard(tmp_path)
    section = markdown.split("## Worlds without exact references (Monte Carlo)")[1]
    assert "### lunar_lander_windy" in section  # its conf/env name, not lunar_lander's
    rows = [line for line in section.splitlines() if line.startswith("| dsac") or
            line.startswith("| tqc")]
    assert rows[0].startswith("| dsac /") and rows[1].startswith("| tqc /")  # best U first
    # dsac: 5 seeds, IQM of 50..120 cuts one run at each end -> mean(70, 80, 90) = 80
    assert "| 5 | 80 |" in rows[0] and "95% CI" in rows[0] and "| 120 | 40 |" in rows[0]
    # tqc: 3 seeds, IQM = mean of all three (no cut below 4 runs), the seeds' range
    assert "| 3 | -23.33 | [-60, 10] | range of the runs: 3 seeds x 1 world" in rows[1]
    mc_rows = (tmp_path / benchmark.MONTE_CARLO_FILE).read_text().splitlines()
    assert len(mc_rows) == 1 + 8 and mc_rows[0].startswith("job,world,agent,measure")
    # the scored run is ranked as before, and no Monte Carlo run is said to be left out
    assert "| 1 | c51 |" in markdown and "left out" not in markdown


def test_a_risk_conditioned_run_is_a_method_of_its_own(tmp_path):
    """A conditioned agent evaluated at a setting is not pooled with the agent trained at
    that setting alone: same agent, measure, alpha and world, two rows."""
    for job, conditioned in enumerate((False, True)):
        for seed in range(2):
            lander = windy_lander(seed=seed)
            lander["agent"]["risk_conditioned"] = conditioned
            _write_run(tmp_path / f"{job}_agent=tqc" / f"seed_{seed}", lander,
                       {"seed": seed, "episodes": 10, "utility": 10.0 * job + seed,
                        "expectation": 0.0, "risk_value": 0.0})
    section = write_leaderboard(tmp_path).split("### lunar_lander_windy")[1]
    assert "| tqc (risk-conditioned) / cvar(rho=0.1) a=0.5 / per_decision | 2 | 10.5 |" in section
    assert "| tqc / cvar(rho=0.1) a=0.5 / per_decision | 2 | 0.5 |" in section


def test_a_dsac_whose_actor_reads_the_critics_mixture_is_a_method_of_its_own(tmp_path):
    """agent.actor_law=mixture names its own row; the default pessimistic law, the agent's
    name alone."""
    for job, law in enumerate(("pessimistic", "mixture", "mixture")):
        lander = windy_lander("dsac", seed=0)
        lander["agent"]["actor_law"] = law
        lander["agent"]["risk_conditioned"] = job == 2
        _write_run(tmp_path / f"{job}_agent=dsac" / "seed_0", lander,
                   {"seed": 0, "episodes": 10, "utility": float(job), "expectation": 0.0,
                    "risk_value": 0.0})
    section = write_leaderboard(tmp_path).split("### lunar_lander_windy")[1]
    for label, utility in (("dsac", 0), ("dsac (mixture actor)", 1),
                           ("dsac (mixture actor, risk-conditioned)", 2)):
        assert f"| {label} / cvar(rho=0.1) a=0.5 / per_decision | 1 | {utility} |" in section


def test_a_world_is_named_by_its_conf_file_or_else_by_its_id_and_keyword_arguments():
    worlds = benchmark.world_names()
    windy = windy_lander()["env"]
    assert benchmark.world_label(windy, worlds) == "lunar_lander_windy"
    assert benchmark.world_label({"id": "LunarLander-v3", "kwargs": {}}, worlds) == "lunar_lander"
    # Discrete LunarLander with wind: no conf/env file is that world, so it is not called
    # lunar_lander (the calm one) but named by what it is.
    discrete_windy = {"id": "LunarLander-v3", "kwargs": {"enable_wind": True}}
    assert benchmark.world_label(discrete_windy, worlds) == \
        'LunarLander-v3 {"enable_wind": true}'
    assert benchmark.world_label({"id": "Acrobot-v1"}, worlds) == "Acrobot-v1"


def test_a_sweep_of_worlds_without_references_alone_still_gets_its_table(tmp_path):
    for seed in range(2):
        _write_run(tmp_path / "0_agent=tqc" / f"seed_{seed}", windy_lander(seed=seed),
                   {"seed": seed, "episodes": 10, "utility": -100.0 + seed,
                    "expectation": -50.0, "risk_value": None})
    markdown = write_leaderboard(tmp_path)
    assert "nothing is ranked" in markdown and "### lunar_lander_windy" in markdown
    assert "| 2 | -99.5 | [-100, -99] |" in markdown and "| — | 10 |" in markdown
    assert not (tmp_path / "profiles.png").exists()
    with pytest.raises(FileNotFoundError, match="no finished run"):
        write_leaderboard(tmp_path / "empty")


def test_score_writes_the_leaderboard_of_finished_sweeps_without_training(tmp_path, capsys):
    for name in ("a", "b"):
        _write_run(tmp_path / name / "0_agent=tqc" / "seed_0", windy_lander(),
                   {"seed": 0, "episodes": 10, "utility": 1.0 if name == "a" else 3.0,
                    "expectation": 2.0, "risk_value": 0.0})
    out = tmp_path / "board"
    assert command.main(["--score", str(tmp_path / "a"), str(tmp_path / "b"), "--out", str(out),
                         "--wandb", "off"]) == 0
    assert "| 2 | 2 | [1, 3] |" in (out / "leaderboard.md").read_text()  # both sweeps pooled
    assert command.main(["--score", str(tmp_path / "none"), "--wandb", "off"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert err[-1].startswith("error: --score: no finished run in")
    # the training flags mean nothing without training: refused, not ignored
    assert command.main(["--score", str(tmp_path / "a"), "--agents", "c51", "--wandb", "off",
                         "trainer.max_steps=10"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert err == ["error: --score: trains nothing, so --agents, trainer.max_steps=10 would be "
                   "ignored; score without them, or train without --score"]
