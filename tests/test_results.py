"""The sweep results table: aggregation over seeds beside the paper's numbers."""

from __future__ import annotations

import json
import math

from rs_lightning.results import main, summarize, write_results


def eval_row(env, agent, seed, expectation, var, green):
    return {
        "env": env, "agent": agent, "seed": seed, "alpha": 0.5, "risk": "var", "rho": 0.1,
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
    assert lines[0].startswith("| RiskyRewards-v0 | dqn | 0.5 | var_0.1 | 2 |")
    assert "(0.3)" in lines[0] and "(-1.246)" in lines[0]
    assert lines[1].startswith("| RiskyGridWorld-v0 | rs_umdqn_c |")
    assert (tmp_path / "results.csv").read_text().count("\n") == 3


def test_cli_reports_an_empty_sweep_folder(tmp_path, capsys):
    assert main([str(tmp_path)]) == 2
    assert "no */eval.json" in capsys.readouterr().err


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
    assert lines[0].startswith("| RiskyRewards-v0 | c51 | 0.5 | var_0.1 | 3 |")
    assert lines[1].startswith("| RiskyRewards-v0 | iqn | 0.5 | var_0.1 | 1 |")
    assert not (tmp_path / "a" / "results.md").exists()
