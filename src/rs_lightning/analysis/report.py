"""The report of a sweep: results table, the paper's figures, an HTML page and W&B.

    rs-lightning report outputs/multirun/<sweep>            # files + offline W&B run
    rs-lightning report outputs/runs/<run>                  # a single run
    rs-lightning report outputs/multirun/<sweep> --wandb online --wandb-report
    rs-lightning report outputs/multirun/<sweep> --sync     # offline runs to the web

writes into ``<sweep>/report/``:

- ``results.md`` / ``results.csv``: one row per setting (every config difference but the
  seed; :mod:`rs_lightning.analysis.results`): mean ± std over seeds beside the paper's numbers,
  interquartile mean with a 95% bootstrap interval (the seeds' range below 5 seeds), Monte
  Carlo and, on the grid worlds, exact;
- ``learning_curves.png``: R_s, E, VaR and U of the greedy policy against training steps,
  mean and 95% bootstrap band over seeds (their range below 5 seeds: the legend says which),
  one column per environment (the paper's Figure 4);
- ``probability_of_improvement.png`` (several settings of one environment): the chance that
  a seed of one setting beats a seed of another on U, E and VaR;
- ``distribution_error.png``: the Wasserstein-1 distance between the learned and the exact
  return distribution at the start state during training (grid worlds);
- ``distributions_<env>_<agent>.png``: the learned CDF and density of Z(s, a) of every action
  of a decision state, with the exact laws, Q, R and U (the paper's Figure 5);
- ``report.html``: all of the above in one self-contained page (images inlined), with the
  trials of an Optuna study (``optimization_history.csv``) when the sweep was one.

The same table and figures go to W&B in a summary run of the sweep's group (job type
``report``; offline unless ``--wandb online``), and each training run already carries its own
evaluation table and distribution figure. Online, ``--wandb-report`` also creates a W&B
Report of the sweep; :func:`wandb_report` builds its spec, which is tested offline.

``--sync`` takes a sweep logged offline to the web in one command: it uploads the training
runs' offline W&B folders (``wandb sync``), then the report run, then creates the W&B Report,
in that order, so that the Report's panels find their runs. The report run has one id per
sweep (:func:`report_run_id`): a rerun replaces it instead of adding another.
"""

from __future__ import annotations

import base64
import hashlib
import html
import subprocess
import sys
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Optional

from rs_lightning.analysis.plots import (
    DISTANCE_METRICS,
    load_histories,
    plot_learning_curves,
    plot_probability_of_improvement,
    plot_return_distributions,
)
from rs_lightning.analysis.results import (
    TABLE_KINDS,
    TABLE_TITLES,
    collect,
    label_columns,
    no_runs_message,
    table_columns,
    table_notes,
    table_rows,
    table_warnings,
    write_table,
)
from rs_lightning.analysis.return_histograms import plot_return_histograms
from rs_lightning.analysis.runs import load_run
from rs_lightning.analysis.study import read_study
from rs_lightning.analysis.wandb_support import (
    init_wandb_run,
)
from rs_lightning.config.migrations import read_run_config
from rs_lightning.envs import GRID_WORLDS
from rs_lightning.files import write_text_atomic

# The state whose decision each grid world's distribution figure shows: where the
# risk-averse and the expectation-seeking choices differ.
DECISION_CELLS: dict[str, tuple[int, int]] = {
    "rs_lightning/RiskyRewards-v0": (2, 1),
    "rs_lightning/RiskyTransitions-v0": (1, 0),
    "rs_lightning/RiskyGridWorld-v0": (1, 0),
}
START_CELL = (1, 0)

# What the W&B Report plots against the training step, one panel each.
REPORT_CURVES: tuple[tuple[str, str], ...] = (
    ("eval/risk_outcome", "R_s of the greedy policy (+1 green, -1 orange)"),
    ("eval/expectation", "E[S] of the greedy policy"),
    ("eval/var", "VaR[S] of the greedy policy"),
    ("eval/utility", "U[S] of the greedy policy"),
    ("eval/w1_greedy", "W1 learned vs exact Z(start, greedy action)"),
    ("train/episode_return", "training episode return"),
)
RESULTS_TABLE_KEY = "results"
STUDY_TABLE_KEY = "study"  # the trials of an Optuna study


@dataclass
class Figure:
    key: str  # file stem and W&B media key
    path: Path
    caption: str


@dataclass
class SweepReport:
    sweep_dir: Path
    out_dir: Path
    table: list[dict[str, Any]]
    markdown: str
    figures: list[Figure] = field(default_factory=list)
    jobs: int = 0
    group: str = ""
    project: str = "rs-lightning"
    entity: Optional[str] = None
    study: Optional[dict[str, Any]] = None  # an Optuna sweep's trials (objective.read_study)
    damaged: list[str] = field(default_factory=list)  # runs left out: files not readable

    @property
    def html_path(self) -> Path:
        return self.out_dir / "report.html"


def _job_config(sweep_dir: Path, job: str):
    path = sweep_dir / job / "config.yaml"
    return read_run_config(path) if path.is_file() else None


def _env_name(env_id: str) -> str:
    """The short name of an environment (its config name for the grid worlds)."""

    names = {env: name for name, env in GRID_WORLDS.items()}
    text = names.get(env_id, env_id.split("/")[-1])
    return "".join(c if c.isalnum() else "_" for c in text).strip("_").lower()


def _figure_suffix(entry: dict[str, Any]) -> str:
    """What tells a row's figure file apart from another of the same env and agent."""
    text = f"_alpha{entry['alpha']:g}_{entry['risk']}{entry['rho']:g}"
    text += "".join(f"_{name.split('.')[-1]}{value}" for name, value in entry["varying"].items())
    text += f"_updates{entry['budget']}"
    return "".join(c if c.isalnum() or c == "_" else "p" for c in text)


def render_figures(sweep_dir: Path, out_dir: Path, rows: list[dict[str, Any]],
                   table: list[dict[str, Any]]) -> list[Figure]:
    """Draw every figure of the report into ``out_dir``."""

    figures: list[Figure] = []
    histories = load_histories(sweep_dir)
    if histories:
        path = out_dir / "learning_curves.png"
        plot_learning_curves(sweep_dir, path)
        figures.append(Figure(
            "learning_curves", path,
            "The greedy policy during training: risk indicator R_s (+1 green, -1 orange path), "
            "E, VaR and U of the return; mean over seeds and a band within the metric's "
            "range: the 95% bootstrap interval of the mean, or below 5 seeds the seeds' range "
            "(each curve's legend says which; the paper's Figure 4).",
        ))
        has_distance = any("w1_greedy" in run[-1] for runs in histories.values() for run in runs)
        if has_distance:
            path = out_dir / "distribution_error.png"
            plot_learning_curves(
                sweep_dir, path, DISTANCE_METRICS,
                "Learned vs exact return distribution at the start state (Wasserstein-1)",
            )
            figures.append(Figure(
                "distribution_error", path,
                "Wasserstein-1 distance between the learned Z(start, a) and its exact law under "
                "the greedy policy, for the greedy action and averaged over actions.",
            ))

    path = out_dir / "return_histograms.png"
    if plot_return_histograms(rows, path):
        figures.append(Figure(
            "return_histograms", path,
            "Episode returns of the greedy policy in the final Monte Carlo evaluation, any "
            "environment: one outline per seed, E solid and VaR dashed.",
        ))
    path = out_dir / "probability_of_improvement.png"
    if plot_probability_of_improvement(table, path):
        figures.append(Figure(
            "probability_of_improvement", path,
            "Probability of improvement (Agarwal et al. 2021): the chance that a seed of the "
            "row's setting reaches a higher U, E or VaR than a seed of the column's, ties "
            "counting half; settings of one environment compared.",
        ))
    shared = Counter((entry["env"], entry["agent"]) for entry in table)
    for entry in table:
        env, agent, job = entry["env"], entry["agent"], entry["jobs"][0]  # the lowest seed
        cell = DECISION_CELLS.get(env)
        config = _job_config(sweep_dir, job)
        if cell is None or config is None or not config.env.get("grid_size"):
            continue  # the figure is drawn for one state of a grid world
        if not (sweep_dir / job / "checkpoints" / "last.ckpt").is_file():
            continue
        name = f"distributions_{_env_name(env)}_{agent}"
        if shared[(env, agent)] > 1:
            name += _figure_suffix(entry)
        path = out_dir / f"{name}.png"
        plot_return_distributions(load_run(sweep_dir / job), cell, path)
        figures.append(Figure(
            name, path,
            f"{agent} on {env.split('/')[-1]} (job {job}), state {cell}: learned CDF and density "
            "of Z(s, a) for every action, exact law of each action followed by the greedy policy "
            "dotted, Q solid, R dashed, U star; the chosen action thick (the paper's Figure 5).",
        ))
    return figures


def build_report(sweep_dir: Path, out_dir: Optional[Path] = None) -> SweepReport:
    """Aggregate a sweep: write the table files, the figures and report.html."""
    sweep_dir = Path(sweep_dir)
    out_dir = Path(out_dir) if out_dir is not None else sweep_dir / "report"
    rows = collect(sweep_dir)
    if not rows:
        raise FileNotFoundError(no_runs_message(sweep_dir))
    table, markdown = write_table(rows, out_dir)
    report = SweepReport(sweep_dir, out_dir, table, markdown, jobs=len(rows), group=sweep_dir.name,
                         damaged=rows.damaged)
    config = _job_config(sweep_dir, rows[0]["job"])
    if config is not None and "logger" in config:
        report.project = config.logger.get("project") or report.project
        report.entity = config.logger.get("entity")
        report.group = config.logger.get("group") or report.group
    report.figures = render_figures(sweep_dir, out_dir, rows, table)
    report.study = read_study(sweep_dir)
    write_text_atomic(report.html_path, render_html(report))
    return report


# ------------------------------------------------------------------------------ HTML
_STYLE = """
body { font-family: system-ui, sans-serif; margin: 2em auto; max-width: 1200px; color: #222; }
table { border-collapse: collapse; margin: 1em 0; font-size: 0.9em; }
th, td { border: 1px solid #ccc; padding: 0.3em 0.6em; text-align: right; }
th { background: #f3f3f3; } td.text { text-align: left; }
figure { margin: 2em 0; } figure img { max-width: 100%; border: 1px solid #eee; }
figcaption { color: #555; font-size: 0.9em; max-width: 60em; }
div.wide { overflow-x: auto; max-width: 100%; }
.note { color: #555; font-size: 0.9em; }
"""


def _html_table(columns: list[str], rows: list[list[str]], labels: int) -> str:
    """A table whose first ``labels`` columns (the setting) are left-aligned text."""
    head = "".join(f"<th>{html.escape(c)}</th>" for c in columns)
    text_class = " class='text'"
    body = "".join(
        "<tr>" + "".join(
            f"<td{text_class if i < labels else ''}>{html.escape(cell)}</td>" for i, cell in enumerate(row)
        ) + "</tr>"
        for row in rows
    )
    # A wide table (many varying settings) scrolls in its own box instead of the page.
    return (f'<div class="wide"><table><thead><tr>{head}</tr></thead><tbody>{body}</tbody>'
            "</table></div>")


def render_html(report: SweepReport) -> str:
    """A self-contained page: tables and figures (PNG inlined as data URIs)."""
    parts = [
        "<!DOCTYPE html><html><head><meta charset='utf-8'>",
        f"<title>rs-lightning report: {html.escape(report.sweep_dir.name)}</title>",
        f"<style>{_STYLE}</style></head><body>",
        f"<h1>Sweep {html.escape(report.sweep_dir.name)}</h1>",
        f"<p class='note'>{report.jobs} finished jobs in <code>{html.escape(str(report.sweep_dir))}"
        "</code>. Regenerate with <code>rs-lightning report "
        f"{html.escape(str(report.sweep_dir))}</code>.</p>",
        "<h2>Results</h2>",
    ]
    notes = table_notes(report.table)
    labels = len(label_columns(report.table))
    for kind in TABLE_KINDS:
        rows = table_rows(report.table, kind)
        if rows:
            parts += [f"<h3>{html.escape(TABLE_TITLES[kind])}</h3>",
                      _html_table(table_columns(report.table, kind), rows, labels),
                      f"<p class='note'>{html.escape(notes[kind])}</p>"]
    parts += [f"<p class='note'><b>Warning</b>: {html.escape(warning)}.</p>"
              for warning in table_warnings(report.table)]
    if report.study:
        history = report.study["history"]
        best = report.study["best"] or {}
        parts += ["<h2>Hyperparameter search</h2>",
                  _html_table(list(history[0]), [list(row.values()) for row in history], 0)
                  if history else "",
                  f"<p class='note'>Optuna's best trial: {html.escape(str(best.get('best_params')))}"
                  f", objective {html.escape(str(best.get('best_value')))} "
                  "(optimization_results.yaml, optimization_history.csv).</p>"]
    if report.figures:
        parts.append("<h2>Figures</h2>")
    for figure in report.figures:
        data = base64.b64encode(figure.path.read_bytes()).decode("ascii")
        parts.append(
            f"<figure id='{figure.key}'><img alt='{html.escape(figure.key)}' "
            f"src='data:image/png;base64,{data}'><figcaption>{html.escape(figure.caption)}"
            "</figcaption></figure>"
        )
    parts.append("</body></html>")
    return "\n".join(parts)


# ------------------------------------------------------------------------------- W&B
def report_run_id(report: SweepReport) -> str:
    """The W&B id of the sweep's report run: the same on every rerun (it depends on the
    project, entity and group, the sweep folder's name by default), so a rerun resumes or,
    synced, replaces that run instead of adding another."""
    key = f"{report.entity or ''}/{report.project}/{report.group}"
    return "report-" + hashlib.sha1(key.encode()).hexdigest()[:16]


def log_report_to_wandb(report: SweepReport, mode: str = "offline") -> tuple[str, str]:
    """Log the table and figures to a W&B run of the sweep's group (job type ``report``).

    Returns the run's local folder and the mode it was logged in: ``mode`` is ``offline``
    or ``online``; when online fails (no credentials, unreachable server), the run is
    logged offline instead.
    """
    import wandb

    run = init_wandb_run(
        mode,
        project=report.project,
        entity=report.entity,
        group=report.group,
        job_type="report",
        name=f"report-{report.group}",
        id=report_run_id(report),
        dir=str(report.out_dir),
        config={"sweep_dir": str(report.sweep_dir), "jobs": report.jobs},
        **({"resume": "allow"} if mode == "online" else {}),
    )
    media: dict[str, Any] = {}
    for kind in TABLE_KINDS:  # results (mean ± std), results_iqm, results_exact
        rows = table_rows(report.table, kind)
        if rows:
            key = RESULTS_TABLE_KEY if kind == "mean" else f"{RESULTS_TABLE_KEY}_{kind}"
            media[key] = wandb.Table(columns=table_columns(report.table, kind), data=rows)
    for figure in report.figures:
        media[f"figures/{figure.key}"] = wandb.Image(str(figure.path), caption=figure.caption)
    if report.study and report.study["history"]:
        history = report.study["history"]
        media[STUDY_TABLE_KEY] = wandb.Table(columns=list(history[0]),
                                             data=[list(row.values()) for row in history])
        best = report.study["best"] or {}
        if "best_value" in best:
            run.summary["study/best_value"] = best["best_value"]
            run.summary["study/best_params"] = best.get("best_params")
    run.log(media)
    folder = str(Path(run.dir).parent)
    logged = "offline" if getattr(run, "offline", mode == "offline") else "online"
    run.finish()
    return folder, logged


# ------------------------------------------------------------------ offline to the web
def training_run_folders(report: SweepReport) -> list[Path]:
    """The offline W&B folders of the sweep's training runs (``<job>/wandb/offline-run-*``,
    ``<job>/seed_<s>/wandb/...``, or the run folder's own), not those of report runs."""
    sweep = report.sweep_dir
    found = [*sweep.glob("wandb/offline-run-*"), *sweep.glob("*/wandb/offline-run-*"),
             *sweep.glob("*/seed_*/wandb/offline-run-*")]
    out_dir = report.out_dir.resolve()
    return sorted(path for path in found
                  if path.is_dir() and not path.resolve().is_relative_to(out_dir))


def run_wandb_sync(folders: list[Path]) -> int:
    """``wandb sync <folders>``: upload offline runs (already uploaded ones are skipped);
    returns its exit status."""
    command = [sys.executable, "-m", "wandb", "sync", *map(str, folders)]
    return subprocess.run(command, stdin=subprocess.DEVNULL).returncode


def save_wandb_report(spec) -> str:
    """Create the W&B Report ``spec`` on the server; returns its address."""
    spec.save()
    return spec.url


def create_wandb_report(report: SweepReport) -> int:
    spec = wandb_report(report.project, report.entity, report.group,
                        [f.key for f in report.figures], study=bool(report.study))
    try:
        print(f"W&B report: {save_wandb_report(spec)}")
    except Exception as error:  # the server decides; the local report is complete anyway
        print(f"warning: the W&B Report was not created: {error}", file=sys.stderr)
        return 1
    return 0


def sync_to_wandb(report: SweepReport) -> int:
    """Upload the training runs, then the report run, then create the W&B Report."""
    training = training_run_folders(report)
    print(f"W&B: uploading {len(training)} offline training runs of {report.sweep_dir}")
    if training and run_wandb_sync(training) != 0:
        print("error: --sync: `wandb sync` of the training runs failed (see above)", file=sys.stderr)
        return 1
    # Logged offline, then uploaded: the same steps whether or not the server answers now.
    folder, _ = log_report_to_wandb(report, "offline")
    import wandb

    wandb.teardown()  # W&B's service closes the run's file before `wandb sync` reads it
    print(f"W&B: uploading the report run {report_run_id(report)} ({folder})")
    if run_wandb_sync([Path(folder)]) != 0:
        print("error: --sync: `wandb sync` of the report run failed (see above)", file=sys.stderr)
        return 1
    return create_wandb_report(report)


def log_run_media(experiment, summary: dict[str, Any], figure: Optional[Path],
                  video: Optional[Path] = None) -> None:
    """A training run's own evaluation table, distribution figure and episode video (a GIF),
    in its W&B run."""
    import wandb

    scalars = {k: v for k, v in sorted(summary.items()) if isinstance(v, (int, float, str))}
    media: dict[str, Any] = {
        "eval/summary": wandb.Table(columns=["metric", "value"], data=[[k, str(v)] for k, v in scalars.items()]),
    }
    if figure is not None and Path(figure).is_file():
        media["figures/distributions"] = wandb.Image(str(figure))
    if video is not None and Path(video).is_file():
        media["eval/episode"] = wandb.Video(str(video), format="gif")
    experiment.log(media)


def wandb_report(
    project: str,
    entity: Optional[str],
    group: str,
    figures: list[str] = (),
    title: Optional[str] = None,
    study: bool = False,
):
    """The spec of a W&B Report of a sweep (a ``wandb_workspaces`` Report, not yet saved).

    One panel grid of the training runs of ``group`` with the curves of ``REPORT_CURVES``
    grouped by agent, and one of the report run with the results table, the figures and,
    after an Optuna study (``study``), the table of its trials.
    """
    import wandb_workspaces.reports.v2 as wr

    training = wr.Runset(
        entity=entity or "", project=project, name=f"training runs of {group}",
        filters=f"Metric('Group') == '{group}' and Metric('JobType') == 'train'",
    )
    summary = wr.Runset(
        entity=entity or "", project=project, name=f"report of {group}",
        filters=f"Metric('Group') == '{group}' and Metric('JobType') == 'report'",
    )
    curves = [
        wr.LinePlot(title=label, x="trainer/global_step", y=[key], groupby="agent.name")
        for key, label in REPORT_CURVES
    ]
    media = [wr.WeavePanelSummaryTable(table_name=RESULTS_TABLE_KEY)]
    if study:
        media.append(wr.WeavePanelSummaryTable(table_name=STUDY_TABLE_KEY))
    if figures:
        media.append(wr.MediaBrowser(title="figures", media_keys=[f"figures/{f}" for f in figures]))
    return wr.Report(
        project=project,
        entity=entity or "",
        title=title or f"Risk-sensitive distributional RL: sweep {group}",
        description="Greedy-policy evaluation during training, results over seeds and the "
                    "learned return distributions (rs-lightning).",
        blocks=[
            wr.TableOfContents(),
            wr.H1("Results"),
            wr.P("Mean ± standard deviation and interquartile mean with a 95% bootstrap "
                 "interval over seeds (below 5 seeds: the seeds' range) of the greedy "
                 "policy's evaluation, one row per setting, "
                 "beside the paper's numbers, and the figures of the sweep."),
            wr.PanelGrid(runsets=[summary], panels=media),
            wr.H1("The greedy policy during training"),
            wr.P("Risk indicator R_s (+1: risk-averse green path, -1: orange path), E, VaR and U "
                 "of the return, and the distance of the learned to the exact return law."),
            wr.PanelGrid(runsets=[training], panels=curves),
        ],
    )


# ------------------------------------------------------------------------------- CLI
