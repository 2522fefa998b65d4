"""The sweep report: from a real multirun to the table, the figures, HTML and W&B files."""

from __future__ import annotations

import json
import re
import subprocess

import pytest

from rs_lightning.analysis.report import (
    REPORT_CURVES,
    RESULTS_TABLE_KEY,
    wandb_report,
)
from rs_lightning.app.commands.report import main
from tests.conftest import ROOT
from tests.warm_python import command as python_command


@pytest.fixture(scope="module")
def sweep(tmp_path_factory):
    """A real two-agent multirun through the CLI, logging to offline W&B runs."""
    sweep_dir = tmp_path_factory.mktemp("sweep")
    subprocess.run(
        [*python_command(), "train.py", "-m", "agent=dqn,rs_umdqn_c", "debug=quick",
         "callbacks.progress_bar=false", f"hydra.sweep.dir={sweep_dir}"],
        cwd=ROOT, check=True, capture_output=True, stdin=subprocess.DEVNULL, timeout=300,
    )
    return sweep_dir


@pytest.fixture(scope="module")
def report_dir(sweep):
    assert main([str(sweep)]) == 0
    return sweep / "report"


def png(path):
    data = path.read_bytes()
    return data[:4] == b"\x89PNG" and len(data) > 10_000


def test_report_writes_the_table_and_every_figure(report_dir):
    names = sorted(p.name for p in report_dir.glob("*.png"))
    assert names == [
        "distribution_error.png",
        "distributions_risky_rewards_dqn.png",
        "distributions_risky_rewards_rs_umdqn_c.png",
        "learning_curves.png",
        "probability_of_improvement.png",  # two agents on one environment
        "return_histograms.png",
    ]
    assert all(png(report_dir / name) for name in names)
    markdown = (report_dir / "results.md").read_text()
    rows = [line for line in markdown.splitlines() if line.startswith("| RiskyRewards-v0")]
    # A Monte Carlo row (mean ± std), an IQM row and an exact row per agent.
    assert len(rows) == 6
    assert markdown.startswith("| env | agent | alpha | risk | updates | seeds |")
    assert rows[0].startswith("| RiskyRewards-v0 | dqn | 0.5 | var_0.1 | 300 | 1 |")
    assert (report_dir / "results.csv").read_text().count("\n") == 3


def test_html_report_is_self_contained(report_dir):
    page = (report_dir / "report.html").read_text()
    images = re.findall(r"<img [^>]*src='([^']*)'", page)
    assert len(images) == 6 and all(src.startswith("data:image/png;base64,") for src in images)
    assert "http" not in page.split("<body>")[1].replace("python -m", "")
    assert page.count("<table>") == 3  # Monte Carlo, its IQM and intervals, and exact
    for agent in ("dqn", "rs_umdqn_c"):
        assert f"<td class='text'>{agent}</td>" in page


def test_summary_run_and_training_runs_carry_the_table_and_figures(sweep, report_dir):
    (summary_run,) = (report_dir / "wandb").glob("offline-run-*")
    media = summary_run / "files" / "media"
    assert len(list(media.glob("table/results_exact_*.table.json"))) == 1
    assert len(list(media.glob("table/results_iqm_*.table.json"))) == 1
    (results,) = [p for p in media.glob("table/results_*.table.json")
                  if "exact" not in p.name and "iqm" not in p.name]
    table = json.loads(results.read_text())
    assert sorted(row[1] for row in table["data"]) == ["dqn", "rs_umdqn_c"]
    assert len(list(media.glob("images/figures/*.png"))) == 6
    jobs = [p for p in sweep.iterdir() if (p / "eval.json").is_file()]
    assert len(jobs) == 2
    for job in jobs:
        (run,) = (job / "wandb").glob("offline-run-*")
        assert list((run / "files" / "media").glob("table/eval/summary_*.table.json"))
        assert list((run / "files" / "media").glob("images/figures/distributions_*.png"))


def test_training_runs_log_exact_metrics_and_distances(sweep):
    for job in (p for p in sweep.iterdir() if (p / "eval.json").is_file()):
        final = json.loads((job / "eval.json").read_text())
        assert {"exact_expectation", "exact_var", "exact_cvar", "exact_utility", "exact_risk_outcome"} <= set(final)
        history = [json.loads(line) for line in (job / "eval_history.jsonl").read_text().splitlines()]
        assert all(0 <= record["w1_greedy"] < 5 for record in history)


def test_wandb_report_spec_plots_what_the_runs_log(sweep):
    import wandb_workspaces.reports.v2 as wr
    from wandb_workspaces.expr import expr_to_filters

    spec = wandb_report("rs-lightning", None, sweep.name, ["learning_curves"])
    grids = [block for block in spec.blocks if isinstance(block, wr.PanelGrid)]
    summary_grid, training_grid = grids
    assert isinstance(summary_grid.panels[0], wr.WeavePanelSummaryTable)
    assert summary_grid.panels[0].table_name == RESULTS_TABLE_KEY
    assert summary_grid.panels[1].media_keys == ["figures/learning_curves"]
    # The run sets select the sweep's group, and W&B's own parser reads the filters.
    for grid, job_type in ((summary_grid, "report"), (training_grid, "train")):
        text = str(expr_to_filters(grid.runsets[0].filters))
        assert sweep.name in text and job_type in text
    # Every curve is a metric the training runs actually write.
    job = next(p for p in sweep.iterdir() if (p / "eval_history.jsonl").is_file())
    evaluated = json.loads((job / "eval_history.jsonl").read_text().splitlines()[-1])
    plotted = [panel.y[0] for panel in training_grid.panels]
    assert plotted == [key for key, _ in REPORT_CURVES]
    for key in plotted:
        section, name = key.split("/")
        if section == "eval":
            assert name in evaluated
    assert all(panel.x == "trainer/global_step" for panel in training_grid.panels)


def test_report_of_a_single_run_folder(sweep, tmp_path, capsys):
    job = next(p for p in sweep.iterdir() if (p / "eval.json").is_file())
    assert main([str(job), "--wandb", "off", "--out", str(tmp_path / "report")]) == 0
    markdown = (tmp_path / "report" / "results.md").read_text()
    assert len([line for line in markdown.splitlines() if line.startswith("| RiskyRewards-v0")]) == 3
    assert (tmp_path / "report" / "learning_curves.png").is_file()
    assert not (tmp_path / "report" / "probability_of_improvement.png").exists()  # one setting


def test_report_refuses_bad_input(tmp_path, capsys):
    assert main([str(tmp_path)]) == 2
    error = capsys.readouterr().err
    assert f"no finished run in {tmp_path}: expected eval.json in a run folder" in error
    assert main([str(tmp_path), "--wandb-report"]) == 2
    assert "--wandb-report" in capsys.readouterr().err


def test_online_report_without_credentials_logs_offline(sweep, tmp_path, monkeypatch, capsys):
    monkeypatch.delenv("WANDB_API_KEY", raising=False)
    monkeypatch.setenv("NETRC", str(tmp_path / "no-netrc"))
    monkeypatch.delenv("WANDB_MODE", raising=False)
    assert main([str(sweep), "--wandb", "online", "--out", str(tmp_path / "report")]) == 0
    captured = capsys.readouterr()
    assert "no W&B credentials" in captured.err and "logging offline" in captured.err
    assert list((tmp_path / "report" / "wandb").glob("offline-run-*"))


def test_return_histogram_title_fits_a_single_setting(tmp_path, monkeypatch):
    """With one setting the figure is one panel wide; its title must not be cut."""
    import rs_lightning.analysis.plots as plots
    from rs_lightning.analysis.return_histograms import plot_return_histograms

    inside = []

    def check_and_save(fig, out):
        fig.tight_layout()
        renderer = fig.canvas.get_renderer()
        title = fig._suptitle.get_window_extent(renderer)
        inside.append(title.x0 >= fig.bbox.x0 and title.x1 <= fig.bbox.x1)

    monkeypatch.setattr(plots, "_save", check_and_save)
    row = {"env": "rs_lightning/RiskyRewards-v0", "agent": "dqn", "alpha": 0.5, "risk": "var",
           "rho": 0.1, "seed": 0, "expectation": 0.3, "var": -1.2,
           "return_histogram": {"edges": [-2.0, 0.0, 2.0], "counts": [3, 7]}}
    assert plot_return_histograms([row], tmp_path / "h.png") == 1
    assert inside == [True]
