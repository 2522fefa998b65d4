"""The sweep results table: rows that never mix settings, statistics over seeds beside the
paper's numbers. Run folders are written here (config.yaml, eval.json), not trained."""

from __future__ import annotations

import json
import math

import numpy as np
import pytest
import yaml

from rs_lightning.analysis.results import collect, summarize, write_results
from rs_lightning.app.commands.results import main
from rs_lightning.analysis.stats import (
    NUMPY_METHOD,
    RLIABLE_METHOD,
    bootstrap_band,
    bootstrap_interval,
    interquartile_mean,
    interval_estimate,
    probability_of_improvement,
)

RISKY_REWARDS = "rs_lightning/RiskyRewards-v0"


def eval_row(env, agent, seed, expectation, var, green, steps=30000):
    return {
        "env": env, "agent": agent, "seed": seed, "alpha": 0.5, "risk": "var", "rho": 0.1,
        "steps": steps,
        "expectation": expectation, "var": var, "cvar": var - 0.1,
        "utility": 0.5 * expectation + 0.5 * var, "risk_outcome": 1.0 if green else -1.0,
        "risk_outcome_green": 1.0 if green else 0.0, "risk_outcome_orange": 0.0 if green else 1.0,
    }


def test_summary_gives_mean_and_sample_std_over_seeds_and_the_paper_value():
    env = "rs_lightning/RiskyRewards-v0"
    rows = [eval_row(env, "dqn", s, e, -1.2, green=False) for s, e in enumerate([0.2, 0.3, 0.4])]
    (entry,) = summarize(rows)
    assert entry["seeds"] == [0, 1, 2]
    assert math.isclose(entry["expectation"], 0.3)
    assert math.isclose(entry["expectation_std"], 0.1)
    assert entry["paper_expectation"] == 0.3 and entry["paper_var"] == -1.246
    assert (entry["green_seeds"], entry["orange_seeds"]) == (0, 3)


def test_results_files_are_written_into_the_sweep_folder(tmp_path):
    jobs = [
        ("rs_lightning/RiskyGridWorld-v0", "rs_umdqn_c", 0, 0.33, 0.02, True),
        ("rs_lightning/RiskyRewards-v0", "dqn", 0, 0.3, -1.24, False),
        ("rs_lightning/RiskyRewards-v0", "dqn", 1, 0.31, -1.25, False),
    ]
    for i, job in enumerate(jobs):
        (tmp_path / f"{i}").mkdir()
        (tmp_path / f"{i}" / "eval.json").write_text(json.dumps(eval_row(*job)))
    (tmp_path / "broken").mkdir()
    (tmp_path / "broken" / "eval.json").write_text("{not json")
    markdown = write_results(tmp_path)
    lines = [line for line in markdown.splitlines() if line.startswith("| Risky")]
    # Paper order of environments; the broken job is skipped.
    assert lines[0].startswith("| RiskyRewards-v0 | dqn | 0.5 | var_0.1 | 30000 | 2 |")
    assert "(0.3)" in lines[0] and "(-1.246)" in lines[0]
    assert lines[1].startswith("| RiskyGridWorld-v0 | rs_umdqn_c |")
    assert (tmp_path / "results.csv").read_text().count("\n") == 3


def test_cli_reports_an_empty_sweep_folder(tmp_path, capsys):
    assert main([str(tmp_path)]) == 2
    error = capsys.readouterr().err
    assert "no finished run in" in error and "<sweep>/*/seed_<s>/eval.json" in error


def test_several_sweeps_pool_into_one_table(tmp_path, capsys):
    for name, agent, seeds in (("a", "c51", (0, 1)), ("b", "iqn", (0,)), ("c", "c51", (2,))):
        for seed in seeds:
            job = tmp_path / name / f"{seed}"
            job.mkdir(parents=True)
            row = eval_row("rs_lightning/RiskyRewards-v0", agent, seed, 0.1, -0.12, True)
            job.joinpath("eval.json").write_text(json.dumps(row))
    sweeps = [str(tmp_path / name) for name in "abc"]
    assert main(sweeps) == 2
    assert "--out: several sweeps pool into one table" in capsys.readouterr().err
    assert main([*sweeps, "--out", str(tmp_path / "pooled")]) == 0
    lines = [line for line in (tmp_path / "pooled" / "results.md").read_text().splitlines()
             if line.startswith("| RiskyRewards")]
    assert lines[0].startswith("| RiskyRewards-v0 | c51 | 0.5 | var_0.1 | 30000 | 3 |")
    assert lines[1].startswith("| RiskyRewards-v0 | iqn | 0.5 | var_0.1 | 30000 | 1 |")
    assert not (tmp_path / "a" / "results.md").exists()


# ------------------------------------------------------------------ rows never mix settings
def config(seed=0, lr=1e-4, max_steps=300, agent="dqn", alpha=0.5, risk=None, **logging):
    """A resolved config as a run folder's config.yaml holds it (the keys that matter here)."""
    return {
        "agent": {"name": agent, "hidden_sizes": [128, 128]},
        "risk": risk or {"name": "var", "rho": 0.1},
        "env": {"id": RISKY_REWARDS, "gamma": 0.9},
        "hardware": {"accelerator": "cpu", "torch_threads": logging.get("threads", 1)},
        "logger": {"backend": "wandb", "group": logging.get("group")},
        "trainer": {"max_steps": max_steps, "log_every_n_steps": 100},
        "callbacks": {"progress_bar": logging.get("progress_bar", True)},
        "seed": seed, "parallel_seeds": 1, "alpha": alpha, "rho": 0.1, "ckpt_path": None,
        "learning": {"lr": lr, "batch_size": 32},
    }


def run_folder(path, expectation=0.3, **settings):
    """A finished run: its config.yaml and the eval.json fields results.collect reads."""
    cfg = config(**settings)
    path.mkdir(parents=True)
    (path / "config.yaml").write_text(yaml.safe_dump(cfg))
    row = eval_row(RISKY_REWARDS, cfg["agent"]["name"], cfg["seed"], expectation, -1.2,
                   green=False, steps=cfg["trainer"]["max_steps"])
    row["alpha"], row["risk"] = cfg["alpha"], cfg["risk"]["name"]
    (path / "eval.json").write_text(json.dumps(row))
    return path


def table_lines(markdown):
    """The rows of the first (mean ± std) table."""
    first = markdown.split("\n\n")[0]
    return [line for line in first.splitlines() if line.startswith("| RiskyRewards")]


def test_an_lr_sweep_gives_one_row_per_lr_with_its_seeds(tmp_path):
    # `-m agent=dqn learning.lr=1e-4,1e-2`, both seed 0: two rows of one seed, not one of two.
    run_folder(tmp_path / "0_learning.lr=0.0001", lr=1e-4)
    run_folder(tmp_path / "1_learning.lr=0.01", lr=1e-2, expectation=0.1)
    # Another seed of the first setting, logged and computed differently: the same row.
    run_folder(tmp_path / "2_seed=1", seed=1, group="other", threads=4, progress_bar=False)
    table = summarize(collect(tmp_path))
    assert [(e["varying"], e["seeds"]) for e in table] == [
        ({"lr": "0.0001"}, [0, 1]), ({"lr": "0.01"}, [0]),
    ]
    assert table[1]["expectation"] == 0.1
    markdown = write_results(tmp_path)
    assert markdown.startswith("| env | agent | alpha | risk | lr | updates | seeds | E[S] |")
    rows = table_lines(markdown)
    assert rows[0].startswith("| RiskyRewards-v0 | dqn | 0.5 | var_0.1 | 0.0001 | 300 | 2 |")
    assert rows[1].startswith("| RiskyRewards-v0 | dqn | 0.5 | var_0.1 | 0.01 | 300 | 1 |")
    iqm_rows = [line for line in markdown.split("\n\n")[2].splitlines() if line.startswith("| Risky")]
    # Two seeds: their range, not an interval.
    assert iqm_rows[0].startswith("| RiskyRewards-v0 | dqn | 0.5 | var_0.1 | 0.0001 | 300 | 2 | 0.300 (range ")
    assert iqm_rows[1].startswith("| RiskyRewards-v0 | dqn | 0.5 | var_0.1 | 0.01 | 300 | 1 | 0.100 |")
    header = (tmp_path / "results.csv").read_text().splitlines()[0].split(",")
    assert header[:8] == ["env", "agent", "alpha", "risk", "rho", "lr", "updates", "seeds"]
    assert "Warning" not in markdown


def test_the_risk_column_names_each_measure_by_its_own_parameters(tmp_path):
    # The run's top-level rho (0.1) is no parameter of Wang's or of a spectral measure.
    run_folder(tmp_path / "wang", risk={"name": "wang", "eta": -0.75})
    run_folder(tmp_path / "spectral", risk={"name": "spectral", "levels": [0.1, 0.3],
                                            "weights": [0.5, 0.5]})
    run_folder(tmp_path / "expectation", risk={"name": "expectation"})
    cells = sorted(line.split(" | ")[3] for line in table_lines(write_results(tmp_path)))
    assert cells == ["expectation", "spectral(levels=[0.1, 0.3],weights=[0.5, 0.5])",
                     "wang_-0.75"]


def test_runs_of_different_budgets_are_other_rows_with_a_warning(tmp_path, capsys):
    run_folder(tmp_path / "long", max_steps=30000)
    run_folder(tmp_path / "short", max_steps=300, expectation=-0.5)
    run_folder(tmp_path / "short_seed1", max_steps=300, seed=1, expectation=-0.6)
    markdown = write_results(tmp_path)
    rows = table_lines(markdown)
    assert len(rows) == 2
    assert rows[0].startswith("| RiskyRewards-v0 | dqn | 0.5 | var_0.1 | 300 | 2 | -0.550 ± 0.071 (0.3) |")
    assert rows[1].startswith("| RiskyRewards-v0 | dqn | 0.5 | var_0.1 | 30000 | 1 | 0.300 (0.3) |")
    assert "mixes training budgets (trainer.max_steps 300, 30000)" in capsys.readouterr().err
    assert "**Warning**: the table mixes training budgets" in markdown


def test_the_same_config_and_seed_twice_is_listed_apart(tmp_path, capsys):
    run_folder(tmp_path / "a", expectation=0.3)
    run_folder(tmp_path / "b", expectation=0.9)  # the same run again (a rerun, a copy)
    run_folder(tmp_path / "c", seed=1, expectation=0.5)
    markdown = write_results(tmp_path)
    (row,) = table_lines(markdown)
    assert row.startswith("| RiskyRewards-v0 | dqn | 0.5 | var_0.1 | 300 | 2 | 0.400 ± 0.141 (0.3) |")
    assert "1 run(s) repeat the config and seed of a run in the table and are left out of it: " \
           "b (seed 0, as a)" in capsys.readouterr().err
    assert "left out of it: b (seed 0, as a)" in markdown
    assert "b (seed 0, as a)" in (tmp_path / "results.csv").read_text()


def test_a_single_run_folder_and_parallel_seeds_jobs(tmp_path, capsys):
    run = run_folder(tmp_path / "run")
    markdown = write_results(run)
    assert table_lines(markdown)[0].startswith("| RiskyRewards-v0 | dqn | 0.5 | var_0.1 | 300 | 1 |")
    assert (run / "results.md").is_file()
    # A parallel_seeds job: one config.yaml per seed_<s> folder.
    for seed in (0, 1):
        run_folder(tmp_path / "sweep" / "0_parallel_seeds=2" / f"seed_{seed}", seed=seed)
    (entry,) = summarize(collect(tmp_path / "sweep"))
    assert entry["seeds"] == [0, 1]
    assert entry["jobs"] == ["0_parallel_seeds=2/seed_0", "0_parallel_seeds=2/seed_1"]


def test_agent_specific_keys_are_told_by_the_agent_name(tmp_path):
    """Keys that differ only because the agent does (its network, its knobs) add no column."""
    run_folder(tmp_path / "dqn", agent="dqn")
    qr = run_folder(tmp_path / "qr", agent="qr_dqn")
    cfg = yaml.safe_load((qr / "config.yaml").read_text())
    cfg["agent"]["kappa"] = 1.0
    (qr / "config.yaml").write_text(yaml.safe_dump(cfg))
    markdown = write_results(tmp_path)
    assert markdown.startswith("| env | agent | alpha | risk | updates | seeds |")


def test_the_alpha_tradeoff_refuses_runs_that_differ_in_more_than_alpha(tmp_path, capsys):
    from rs_lightning.app.commands.gym_results import main as gym_results

    run_folder(tmp_path / "0_learning.lr=0.0001", lr=1e-4)
    run_folder(tmp_path / "1_learning.lr=0.01", lr=1e-2)
    assert gym_results(["tradeoff", str(tmp_path)]) == 2
    assert "the runs differ in more than alpha (lr)" in capsys.readouterr().err
    assert not (tmp_path / "tradeoff.png").exists()
    alphas = tmp_path / "alphas"
    for alpha in (0.5, 1.0):
        run_folder(alphas / f"alpha={alpha}", alpha=alpha)
    run_folder(alphas / "copy", alpha=1.0)  # the same setting and seed: counted once
    assert gym_results(["tradeoff", str(alphas)]) == 0
    assert "alpha 1 (1 seeds)" in capsys.readouterr().out
    assert (alphas / "tradeoff.png").is_file()


# ------------------------------------------------------------------ statistics
def test_interquartile_mean_of_known_arrays():
    # 8 seeds: the lowest 2 and highest 2 cut, the mean of 3, 4, 5, 6.
    assert interquartile_mean([100, 1, 7, 2, 6, 3, 5, 4]) == 4.5
    # 5 seeds: floor(5 / 4) = 1 cut from each end; an outlier does not move it.
    assert math.isclose(interquartile_mean([0, 1, 2, 3, 1000]), 2.0)
    # Below 4 seeds nothing is cut: the mean.
    assert math.isclose(interquartile_mean([1, 2, 6]), 3.0)
    # Along an axis: one IQM per row.
    np.testing.assert_allclose(interquartile_mean([[1, 2, 3, 4], [0, 0, 8, 8]]), [2.5, 4.0])


def test_bootstrap_interval_contains_the_iqm_and_narrows_with_more_seeds():
    rng = np.random.default_rng(1)
    widths = []
    for seeds in (5, 50):
        scores = rng.normal(0.3, 0.2, seeds)
        estimate = interval_estimate(scores, use_rliable=False)
        assert estimate.low <= estimate.iqm <= estimate.high
        assert estimate.method == NUMPY_METHOD
        widths.append(estimate.high - estimate.low)
    assert widths[1] < 0.6 * widths[0]
    # One seed: nothing to resample.
    single = interval_estimate([0.4], use_rliable=False)
    assert (single.low, single.iqm, single.high) == (0.4, 0.4, 0.4)


def test_a_seeded_bootstrap_gives_a_fixed_interval():
    scores = [0.1, 0.5, 0.2, 0.9, 0.3, 0.4, -1.0, 0.35]
    low, high = bootstrap_interval(scores, seed=0)
    assert (round(low, 6), round(high, 6)) == (-0.087812, 0.525)
    assert bootstrap_interval(scores, seed=0) == (low, high)
    assert bootstrap_interval(scores, seed=1) != (low, high)


def test_probability_of_improvement_counts_ties_half():
    assert probability_of_improvement([3, 4], [1, 2]) == 1.0
    assert probability_of_improvement([1, 2], [3, 4]) == 0.0
    # (1 vs 2, 2): 0 + 0; (2 vs 2, 2): 0.5 + 0.5; (3 vs 2, 2): 1 + 1 -> 3 of 6 pairs.
    assert probability_of_improvement([1, 2, 3], [2, 2]) == 0.5


def test_bootstrap_band_stays_in_the_metric_range():
    # R_s is +1 or -1 per evaluation: the band of the mean lies in [-1, 1], and clipping
    # to narrower limits is applied.
    curves = np.array([[1, 1, -1], [-1, 1, -1], [1, -1, -1]], dtype=float)
    low, high = bootstrap_band(curves, limits=(-1.0, 1.0))
    assert (low >= -1).all() and (high <= 1).all() and (low <= high).all()
    assert high[2] == low[2] == -1.0  # every seed agrees
    low, high = bootstrap_band(curves, limits=(-0.5, 0.5))
    assert low.min() >= -0.5 and high.max() <= 0.5


def test_numpy_and_rliable_agree():
    pytest.importorskip("rliable", reason="the stats extra (pip install -e '.[stats]')")
    from rliable import metrics

    scores = np.random.default_rng(2).normal(0.0, 1.0, 10)
    ours = interval_estimate(scores, reps=5000, use_rliable=False)
    theirs = interval_estimate(scores, reps=5000, use_rliable=True)
    assert theirs.method == RLIABLE_METHOD
    assert math.isclose(ours.iqm, float(metrics.aggregate_iqm(scores[:, None])), abs_tol=1e-12)
    # Two resamplings of the same bootstrap: the ends agree within their Monte Carlo error.
    assert abs(ours.low - theirs.low) < 0.1 and abs(ours.high - theirs.high) < 0.1
    assert interval_estimate(scores, reps=500, use_rliable=True) == \
        interval_estimate(scores, reps=500, use_rliable=True)  # seeded
    x, y = scores[:6], scores[4:] + 0.3
    assert math.isclose(probability_of_improvement(x, y),
                        float(metrics.probability_of_improvement(x[:, None], y[:, None])))


def test_the_results_table_and_curves_read_run_folders_without_the_training_code():
    """The table, its statistics and the curves read files only, so they start in a moment
    (the report and the figures of a trained network load runs through the engine)."""
    import subprocess
    import sys

    from tests.conftest import ROOT

    modules = ("results", "stats", "plots", "return_histograms")
    code = (f"import sys; import {', '.join(f'rs_lightning.analysis.{m}' for m in modules)}; "
            "print(' '.join(sorted(sys.modules)))")
    loaded = subprocess.run([sys.executable, "-c", code], cwd=ROOT, check=True,
                            capture_output=True, text=True).stdout.split()
    training = ("rs_lightning.app", "rs_lightning.engine", "rs_lightning.agents",
                "rs_lightning.objectives", "rs_lightning.analysis.runs")
    assert not [m for m in loaded if m.startswith(training)]
    assert "rs_lightning.analysis.results" in loaded


def test_the_exact_table_shows_the_static_utility_and_its_gap():
    from rs_lightning.analysis.results import table_columns, table_rows

    rows = []
    for seed, gap in enumerate([0.0, 0.2]):
        row = eval_row(RISKY_REWARDS, "c51", seed, 0.1, -0.1, green=True)
        row.update({f"exact_{m}": row[m] for m in ("expectation", "var", "cvar", "utility",
                                                    "risk_outcome")})
        row.update(exact_static_utility=0.5 - gap, static_optimum=0.5, static_gap=gap)
        rows.append(row)
    table = summarize(rows)
    columns = table_columns(table, "exact")
    (cells,) = table_rows(table, "exact")
    shown = dict(zip(columns, cells))
    assert shown["static U"] == "0.400 ± 0.141"
    assert shown["static optimum"] == "0.500 ± 0.000"
    assert shown["static gap"] == "0.100 ± 0.141"


def test_fewer_than_5_seeds_give_their_range_and_say_so():
    from rs_lightning.analysis.results import table_notes, table_rows
    from rs_lightning.analysis.stats import RANGE_METHOD, band_label

    estimate = interval_estimate([0.1, 0.9, 0.4], use_rliable=False)
    assert (estimate.low, estimate.high, estimate.method) == (0.1, 0.9, RANGE_METHOD)
    assert interval_estimate([0.1, 0.9, 0.4, 0.2, 0.3], use_rliable=False).method == NUMPY_METHOD
    curves = np.array([[0.0, 1.0], [2.0, 3.0], [1.0, -1.0]])
    low, high = bootstrap_band(curves)
    assert low.tolist() == [0.0, -1.0] and high.tolist() == [2.0, 3.0]
    assert band_label(1) == "one seed: no band"
    assert band_label(3) == "band: the range of 3 seeds"
    assert band_label(5).startswith("band: 95% bootstrap interval")
    rows = [{"env": "rs_lightning/RiskyRewards-v0", "agent": "dqn", "alpha": 1.0, "seed": seed,
             "risk": "cvar", "rho": 0.1, "expectation": value, "var": value, "cvar": value,
             "utility": value, "risk_outcome": 1.0}
            for seed, value in ((0, 0.1), (1, 0.9), (2, 0.4))]
    table = summarize(rows)
    (cells,) = table_rows(table, "iqm")
    assert any(cell.endswith("(range 0.100, 0.900)") for cell in cells)
    assert "fewer than 5 seeds gives the seeds' range" in table_notes(table)["iqm"]


def test_a_float_setting_is_shown_to_6_significant_digits():
    from rs_lightning.analysis.results import value_text, varying_keys

    trial = {"learning.lr": 0.00012345678901234567, "agent.name": "dqn"}
    assert value_text(trial, "learning.lr") == "0.000123457"
    assert value_text(trial, "agent.name") == "dqn"
    # Settings that differ beyond the digits shown still get their column.
    close = {**trial, "learning.lr": 0.00012345678901234}
    assert varying_keys([trial, close]) == ["learning.lr"]
