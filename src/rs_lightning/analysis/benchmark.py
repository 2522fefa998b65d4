"""The leaderboard of a benchmark sweep: every run scored against its world's exact
references, one table ranking the methods over worlds and seeds.

    rs-lightning benchmark ...     # trains the suite, then writes the leaderboard

writes ``leaderboard.md``, ``leaderboard.csv`` (one row per method), ``scores.csv`` (one row
per run) and ``profiles.png`` (performance profiles) into the sweep folder or ``out``. It
reads run folders (``eval.json``, ``config.yaml``) and the exact references; it never trains.

**The score of a run.** ``U`` is what the learned greedy policy attains on the objective the
run optimised, ``U*`` the exact target of that objective on the run's world, and ``U_rand``
the exact utility of the policy that draws every action uniformly at random, all of the
same utility (alpha, measure, level) of the episode's discounted return from the start:

    score = (U - U_rand) / (U* - U_rand)      1: the target, 0: no better than random

- ``objective=per_decision``: ``U`` = U[Z] of the greedy (Markov) policy, exact
  (``eval.json`` ``exact_static_utility``); ``U*`` = that of the per-decision fixed point
  (``per_decision_static_utility``). The fixed point is an equilibrium, not a maximum over
  policies, so a policy that leaves it can score above 1 (it then is not the per-decision
  solution); the leaderboard counts those runs.
- ``objective=static``: ``U`` = U of the whole episode's discounted return of the learned
  policy, which depends on the return so far and so is estimated by Monte Carlo
  (``mc_static_utility``, its standard error in ``scores.csv``); ``U*`` = the static optimum
  (``static_optimum``: on the paper's grid worlds over cell-Markov policies, which a policy
  of the return so far can beat; with VaR on a tabular world the best policy found, a
  lower bound).

**What each figure is.** On the paper's grid worlds and on the finite-horizon tabular
worlds (trading, the American put) the laws are exact, and so are the targets, except the
static VaR optimum on trading: an interval whose lower end a policy attains (the score uses
it) and whose upper end weak duality gives. On the other tabular worlds (cliff walking) the
figures are estimates on a grid, with an error bound where one is known. ``eval.json`` says
which (``<key>_kind``, ``<key>_upper``, ``<key>_error``: TARGET_KINDS); a run whose figures
are not all exact gets the interval of its score (:attr:`RunScore.score_interval`), and the
leaderboard gives the IQM of the lowest and highest possible scores beside the IQM, and a
table of the targets and their kinds. The tabular worlds' references are recomputed when
the runs are scored (a per-decision run's policy is ``eval.json``'s ``greedy_actions``), so
``rs-lightning benchmark --score`` of an old sweep scores it against the current references.

Per method (agent x measure x objective) the interquartile mean of the scores over worlds x
seeds, with a stratified bootstrap interval (each world's seeds resampled within it,
:func:`rs_lightning.analysis.stats.stratified_estimate`) once every world has at least
``MIN_SEEDS_FOR_INTERVAL`` seeds; below that the range of the runs' scores (the seeds of
every world), labelled so.

**Worlds without exact references** (LunarLander, MinAtar, the continuous worlds): a run
there has no target to be scored against, so it is not ranked with the others. Its Monte
Carlo figures (``eval.json``: U, E and R_rho of the greedy policy's episode return S) go to
a table of their own, per world, in the world's units: per method the IQM over its seeds
with the same interval rule, best U first (``monte_carlo.csv``, one row per run).
"""

from __future__ import annotations

import csv
import dataclasses
import io
import json
import math
import sys
from collections import defaultdict
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any, Iterable, Optional

import numpy as np

from rs_lightning.analysis.results import (
    DamagedFile,
    agent_label,
    collect,
    parameters_text,
    read_config,
)
from rs_lightning.analysis.stats import (
    CONFIDENCE,
    MIN_SEEDS_FOR_INTERVAL,
    RANGE_METHOD,
    Estimate,
    interquartile_mean,
    stratified_estimate,
)
from rs_lightning.files import write_text_atomic

# objective -> (the eval.json key of the policy's utility U, that of the target U*)
SCORED_KEYS = {
    "per_decision": ("exact_static_utility", "per_decision_static_utility"),
    "static": ("mc_static_utility", "static_optimum"),
}
# What a reference figure is (eval.json's <key>_kind, references/tabular_references.py):
# exact; an interval (<key> the lower end, attained by a policy, <key>_upper the upper);
# an estimate (<key>_error bounds its error where known). Figures without a kind are exact
# (the paper's grid worlds). A static run's U is sampled: MONTE_CARLO.
TARGET_KINDS = ("exact", "interval", "estimate")
MONTE_CARLO = "monte carlo"
# A world whose target is within this of the random policy's utility ranks nothing.
MIN_SPAN = 1e-9
# Thresholds of the performance profiles: the share of runs scoring at least tau.
PROFILE_POINTS = 201
FILES = ("leaderboard.md", "leaderboard.csv", "scores.csv", "profiles.png")
MONTE_CARLO_FILE = "monte_carlo.csv"  # the runs on worlds without exact references


@dataclass(frozen=True)
class Run:
    """Which run (one seed) of which method on which world."""

    job: str
    world: str
    agent: str
    measure: str
    objective: str
    seed: int

    @property
    def method(self) -> tuple[str, str, str]:
        return self.agent, self.measure, self.objective


@dataclass(frozen=True)
class RunScore(Run):
    """One run's (one seed's) score and what it is made of (environment reward units)."""

    utility: float  # U of the learned policy on the objective it optimised
    target: float  # U*: the per-decision fixed point's, or the static optimum
    random: float  # U of the uniform-random policy
    utility_stderr: Optional[float]  # Monte Carlo standard error of U (static runs)
    # What each figure is (TARGET_KINDS) and the interval that holds its true value (a point
    # where exact; an estimate's ends are its error bound, None where none is known).
    target_kind: str = "exact"
    target_low: Optional[float] = None
    target_high: Optional[float] = None
    utility_kind: str = "exact"
    utility_low: Optional[float] = None
    utility_high: Optional[float] = None
    random_kind: str = "exact"
    random_low: Optional[float] = None
    random_high: Optional[float] = None

    @property
    def gap(self) -> float:
        """U* - U, in the world's units."""
        return self.target - self.utility

    @property
    def score(self) -> float:
        return normalised_score(self.utility, self.target, self.random)

    @property
    def exact(self) -> bool:
        """Whether U*, U_rand and U (where computed, not sampled) are all exact."""
        return self.target_kind == self.random_kind == "exact" and self.utility_kind in (
            "exact", MONTE_CARLO)

    @property
    def score_interval(self) -> Optional[tuple[float, float]]:
        """The scores the true U*, U_rand and U (each in its interval) allow; None where an
        estimate has no error bound. The score is monotone in each of the three while
        U* > U_rand, so the ends are at corners of the box."""
        ends = [(self.utility_low, self.utility_high), (self.target_low, self.target_high),
                (self.random_low, self.random_high)]
        if any(low is None or high is None or not math.isfinite(low + high)
               for low, high in ends):
            return None
        corners = [normalised_score(u, t, r) for u in ends[0] for t in ends[1]
                   for r in ends[2] if t - r > MIN_SPAN]
        if len(corners) < 8:
            return None
        return min(corners), max(corners)


def normalised_score(utility: float, target: float, random: float) -> float:
    """(U - U_rand) / (U* - U_rand): 1 at the target, 0 at the uniform-random policy."""
    return (utility - random) / (target - random)


@dataclass(frozen=True)
class MonteCarloRun(Run):
    """One run (one seed) on a world without exact references: what its greedy policy
    attains by Monte Carlo (``eval.json``), in the world's units."""

    utility: float  # U of the greedy policy's episode return S
    expectation: float  # E[S]
    risk_value: Optional[float]  # R_rho[S] of the run's measure (None at alpha 1 without one)
    expectation_stderr: Optional[float]
    episodes: int


# ----------------------------------------------------------------------------- reading runs
def world_names(conf_dir: Optional[Path] = None) -> dict[str, str]:
    """The names of the ``conf/env`` files (the names the command line uses), keyed by
    gymnasium id and by id and keyword arguments (:func:`world_key`): worlds that share an id
    (LunarLander-v3 with and without wind) keep their own names."""
    from omegaconf import OmegaConf

    from rs_lightning.config import CONF_DIR

    names: dict[str, str] = {}
    for path in sorted((conf_dir or CONF_DIR).glob("env/*.yaml")):
        env = OmegaConf.to_container(OmegaConf.load(path))
        if isinstance(env.get("id"), str):
            names.setdefault(env["id"], path.stem)
            names.setdefault(world_key(env), path.stem)
    return names


def world_key(env: dict[str, Any]) -> str:
    """A world's identity: its gymnasium id and keyword arguments."""
    return json.dumps([env.get("id"), env.get("kwargs") or {}], sort_keys=True, default=str)


def world_label(env: dict[str, Any], worlds: dict[str, str]) -> str:
    """The name of the world a run's ``env`` config is: the ``conf/env`` file of its id and
    keyword arguments; without keyword arguments, the first file of its id, else the id; with
    keyword arguments no file has (``+env.kwargs.enable_wind=true`` on ``env=lunar_lander``),
    the id and those arguments: another world, never merged with a file's."""
    env_id = str(env["id"])
    named = worlds.get(world_key(env))
    if named is not None:
        return named
    kwargs = env.get("kwargs") or {}
    if not kwargs:
        return worlds.get(env_id, env_id)
    return f"{env_id} {json.dumps(kwargs, sort_keys=True, default=str)}"


def measure_label(config: dict[str, Any]) -> str:
    """The utility a run optimised: ``cvar(rho=0.1) a=0.5``."""
    risk = dict(config.get("risk") or {})
    name = risk.pop("name", "?")
    params = parameters_text(risk)
    return f"{name}({params}) a={config.get('alpha')}" if params else f"{name} a={config.get('alpha')}"


class RandomReferences:
    """The uniform-random policy's utility, once per world setting and utility, and the
    world's references as the current code computes them (:meth:`refreshed`)."""

    def __init__(self) -> None:
        self._cache: dict[str, Any] = {}

    def _references(self, config: dict[str, Any]):
        from omegaconf import OmegaConf

        from rs_lightning.config.plugins import import_plugins
        from rs_lightning.config.schema import utility_from
        from rs_lightning.references.ground_truth import exact_references

        key = json.dumps([config.get("env"), config.get("risk"), config.get("alpha")],
                         sort_keys=True, default=str)
        if key not in self._cache:
            import_plugins(config.get("plugins"))  # the run's own measure and environment
            utility = utility_from(config["risk"], float(config["alpha"]))
            rho = float(config["risk"].get("rho", 0.1))
            references = exact_references(OmegaConf.create(config["env"]), rho)
            self._cache[key] = (references, utility, {})
        return self._cache[key]

    def __call__(self, config: dict[str, Any]) -> Optional[float]:
        return self.reference(config)[0]

    def reference(self, config: dict[str, Any]) -> tuple[Optional[float], float, float, str]:
        """(U_rand, its interval's two ends, its kind)."""
        references, utility, found = self._references(config)
        if "random" not in found:
            found["random"] = references.uniform_random_reference(utility)
        return found["random"]

    def refreshed(self, row: dict[str, Any], config: dict[str, Any]) -> dict[str, Any]:
        """``row`` with its references recomputed by the current reference code, on the
        tabular worlds (their laws exact or bounded since eval.json was written): the
        policy-free ones, and with ``greedy_actions`` (a policy of the state) its own."""
        references, utility, found = self._references(config)
        if not hasattr(references, "model"):
            return row
        actions = row.get("greedy_actions")
        key = "policy-free" if actions is None else tuple(actions)
        if key not in found:
            found[key] = (references.static_references(utility) if actions is None else
                          references.stored_policy_references(actions, utility))
        return {**row, **found[key]}


def run_objective(row: dict[str, Any], config: dict[str, Any]) -> str:
    return str(config.get("objective", row.get("objective", "per_decision")))


def run_identity(row: dict[str, Any], config: dict[str, Any], worlds: dict[str, str]
                 ) -> dict[str, Any]:
    """The fields of :class:`Run`: which run of which method on which world."""
    return dict(job=row["job"], world=world_label(config["env"], worlds),
                agent=agent_label(str(config["agent"]["name"]),
                                  config["agent"].get("risk_conditioned") is True,
                                  config["agent"].get("actor_law")),
                measure=measure_label(config),
                objective=run_objective(row, config),
                seed=int(row.get("seed", config.get("seed", 0))))


def reference_interval(row: dict[str, Any], key: str) -> tuple[str, Optional[float],
                                                                Optional[float]]:
    """A reference figure's kind and the interval of its true value (TARGET_KINDS)."""
    value, kind = float(row[key]), str(row.get(f"{key}_kind", "exact"))
    if kind == "interval":
        return kind, value, float(row[f"{key}_upper"])
    if kind == "estimate":
        error = row.get(f"{key}_error")
        return (kind, None, None) if error is None else (kind, value - error, value + error)
    return kind, value, value


def score_run(row: dict[str, Any], config: dict[str, Any], random: Optional[float],
              worlds: dict[str, str],
              random_reference: Optional[tuple[float, float, str]] = None) -> RunScore | str:
    """The run's score, or why it has none (one line); ``random_reference``: the interval
    of U_rand's true value and its kind (default: ``random`` exact)."""
    objective = run_objective(row, config)
    if objective not in SCORED_KEYS:
        return f"objective {objective!r} has no exact target (scored: {', '.join(SCORED_KEYS)})"
    own_key, target_key = SCORED_KEYS[objective]
    if own_key not in row or target_key not in row:
        missing = [key for key in (own_key, target_key) if key not in row]
        return f"its eval.json has no {' or '.join(missing)} (a world or measure without exact references)"
    if random is None:
        return "its world has no exact references"
    target, utility = float(row[target_key]), float(row[own_key])
    if not (math.isfinite(target) and math.isfinite(utility)) or target - random <= MIN_SPAN:
        return (f"its target U*={target:.4g} is not above the random policy's {random:.4g}: "
                "the world ranks nothing with this utility")
    stderr = row.get("mc_static_utility_stderr") if objective == "static" else None
    target_kind, target_low, target_high = reference_interval(row, target_key)
    if objective == "static":  # sampled: its standard error is in utility_stderr
        utility_kind, utility_low, utility_high = MONTE_CARLO, utility, utility
    else:
        utility_kind, utility_low, utility_high = reference_interval(row, own_key)
    random_low, random_high, random_kind = random_reference or (random, random, "exact")
    return RunScore(**run_identity(row, config, worlds), utility=utility, target=target,
                    random=float(random),
                    utility_stderr=None if stderr is None else float(stderr),
                    target_kind=target_kind, target_low=target_low, target_high=target_high,
                    utility_kind=utility_kind, utility_low=utility_low,
                    utility_high=utility_high, random_kind=random_kind,
                    random_low=random_low, random_high=random_high)


def monte_carlo_run(row: dict[str, Any], config: dict[str, Any], worlds: dict[str, str]
                    ) -> MonteCarloRun | str:
    """The Monte Carlo figures of a run on a world without exact references, or why it has
    none (one line)."""
    if "utility" not in row or "expectation" not in row:
        return "its eval.json has no utility or expectation"
    optional = {key: (None if row.get(key) is None else float(row[key]))
                for key in ("risk_value", "expectation_stderr")}
    return MonteCarloRun(**run_identity(row, config, worlds), utility=float(row["utility"]),
                         expectation=float(row["expectation"]),
                         episodes=int(row.get("episodes", 0)), **optional)


@dataclass
class CollectedRuns:
    """The runs of one or more sweeps: scored against exact references, by Monte Carlo
    alone (worlds without references), and one line for each run left out."""

    scores: list[RunScore]
    monte_carlo: list[MonteCarloRun]
    left_out: list[str]


def collect_runs(*sweep_dirs: Path) -> CollectedRuns:
    """Every finished run below each of ``sweep_dirs``, scored or with its Monte Carlo
    figures."""
    worlds, random_of = world_names(), RandomReferences()
    collected = CollectedRuns([], [], [])
    for sweep_dir in map(Path, sweep_dirs):
        rows = collect(sweep_dir)
        collected.left_out += [f"{line} (unreadable)" for line in rows.damaged]
        for row in rows:
            try:
                config = read_config(sweep_dir / row["job"])
            except DamagedFile as error:
                collected.left_out.append(str(error))
                continue
            if config is None:
                collected.left_out.append(f"{row['job']}: no config.yaml")
                continue
            random = random_of(config)
            if random is not None:
                value, low, high, kind = random_of.reference(config)
                if value != random:  # a value from elsewhere: a point
                    low, high, kind = random, random, "exact"
                scored = score_run(random_of.refreshed(row, config), config, random, worlds,
                                   (low, high, kind))
            else:
                scored = monte_carlo_run(row, config, worlds)
            if isinstance(scored, str):
                collected.left_out.append(f"{row['job']}: {scored}")
            elif isinstance(scored, RunScore):
                collected.scores.append(scored)
            else:
                collected.monte_carlo.append(scored)
    return collected


# ----------------------------------------------------------------------------- statistics
@dataclass(frozen=True)
class MethodSummary:
    agent: str
    measure: str
    objective: str
    worlds: int
    runs: int
    fewest_seeds: int  # the fewest seeds of one world
    estimate: Estimate  # IQM of the scores over worlds x seeds, interval or range
    above_target: int  # runs scoring above 1 (per-decision: not the fixed point)
    world_iqm: dict[str, float]  # each world's IQM over its seeds
    # Where a figure is not exact: the IQM of the runs' lowest and highest possible scores
    # (the IQM is monotone in every run's score, so the true IQM lies between); None where
    # every figure is exact, (nan, nan) where an estimate has no error bound.
    bounds: Optional[tuple[float, float]] = None
    world_bounds: dict[str, tuple[float, float]] = dataclasses.field(default_factory=dict)

    @property
    def interval_label(self) -> str:
        return interval_label(self.estimate, self.fewest_seeds, self.worlds)


def interval_label(estimate: Estimate, seeds: int, worlds: int) -> str:
    """What the interval is: a confidence interval only with MIN_SEEDS_FOR_INTERVAL seeds
    in every world; below, the range of the runs (every seed of every world)."""
    if estimate.method == RANGE_METHOD or seeds < MIN_SEEDS_FOR_INTERVAL:
        return (f"range of the runs: {seeds} seed{'s' if seeds != 1 else ''} x {worlds} "
                f"world{'s' if worlds != 1 else ''} (no CI below {MIN_SEEDS_FOR_INTERVAL} seeds)")
    return f"{CONFIDENCE:.0%} CI, stratified bootstrap"


def summarize(scores: Iterable[RunScore], seed: int = 0) -> list[MethodSummary]:
    """One summary per method, best IQM first."""
    by_method: dict[tuple, dict[str, list[float]]] = defaultdict(lambda: defaultdict(list))
    above: dict[tuple, int] = defaultdict(int)
    for run in sorted(scores, key=lambda r: (r.method, r.world, r.seed)):
        by_method[run.method][run.world].append(run.score)
        above[run.method] += run.score > 1.0 + 1e-9
    runs_of: dict[tuple, dict[str, list[RunScore]]] = defaultdict(lambda: defaultdict(list))
    for run in scores:
        runs_of[run.method][run.world].append(run)
    summaries = []
    for (agent, measure, objective), worlds in by_method.items():
        tasks = list(worlds.values())
        estimate = stratified_estimate(tasks, seed=seed)
        world_bounds = {world: score_bounds(runs)
                        for world, runs in runs_of[(agent, measure, objective)].items()
                        if not all(run.exact for run in runs)}
        every_run = [run for runs in runs_of[(agent, measure, objective)].values()
                     for run in runs]
        summaries.append(MethodSummary(
            agent, measure, objective, worlds=len(tasks), runs=sum(map(len, tasks)),
            fewest_seeds=min(map(len, tasks)), estimate=estimate,
            above_target=above[(agent, measure, objective)],
            world_iqm={world: float(interquartile_mean(v)) for world, v in worlds.items()},
            bounds=score_bounds(every_run) if world_bounds else None,
            world_bounds=world_bounds))
    return sorted(summaries, key=lambda m: (-m.estimate.iqm, m.agent, m.measure, m.objective))


def score_bounds(runs: list[RunScore]) -> tuple[float, float]:
    """The IQM of the runs' lowest and of their highest possible scores (nan where a run's
    score has no bound)."""
    intervals = [run.score_interval for run in runs]
    if any(interval is None for interval in intervals):
        return math.nan, math.nan
    return (float(interquartile_mean([low for low, _ in intervals])),
            float(interquartile_mean([high for _, high in intervals])))


def _bounds_text(bounds: Optional[tuple[float, float]]) -> str:
    if bounds is None:
        return "exact"
    if not all(map(math.isfinite, bounds)):
        return "estimate, no bound"
    return f"[{bounds[0]:.3f}, {bounds[1]:.3f}]"


def performance_profile(scores: Iterable[RunScore], taus: np.ndarray
                        ) -> dict[tuple[str, str, str], np.ndarray]:
    """{method: the share of its runs with a score >= tau, for each tau}."""
    by_method: dict[tuple, list[float]] = defaultdict(list)
    for run in scores:
        by_method[run.method].append(run.score)
    return {method: (np.asarray(values)[None, :] >= taus[:, None]).mean(axis=1)
            for method, values in sorted(by_method.items())}


@dataclass(frozen=True)
class MonteCarloSummary:
    """A method's runs on one world without exact references: IQMs over its seeds."""

    world: str
    agent: str
    measure: str
    objective: str
    seeds: int
    utility: Estimate  # IQM of U, with the interval rule of the scores
    expectation: float  # IQM of E
    risk_value: Optional[float]  # IQM of R_rho (None where a run has none)
    episodes: int  # the fewest evaluation episodes of a run

    @property
    def interval_label(self) -> str:
        return interval_label(self.utility, self.seeds, 1)


def summarize_monte_carlo(runs: Iterable[MonteCarloRun], seed: int = 0
                          ) -> list[MonteCarloSummary]:
    """One summary per world and method: by world, best IQM of U first."""
    groups: dict[tuple[str, tuple[str, str, str]], list[MonteCarloRun]] = defaultdict(list)
    for run in sorted(runs, key=lambda r: (r.world, r.method, r.seed)):
        groups[(run.world, run.method)].append(run)
    summaries = []
    for (world, (agent, measure, objective)), group in groups.items():
        risks = [run.risk_value for run in group]
        summaries.append(MonteCarloSummary(
            world, agent, measure, objective, seeds=len(group),
            utility=stratified_estimate([[run.utility for run in group]], seed=seed),
            expectation=float(interquartile_mean([run.expectation for run in group])),
            risk_value=None if None in risks else float(interquartile_mean(risks)),
            episodes=min(run.episodes for run in group)))
    return sorted(summaries, key=lambda m: (m.world, -m.utility.iqm, m.agent, m.measure,
                                            m.objective))


# ----------------------------------------------------------------------------- outputs
def _method_name(agent: str, measure: str, objective: str) -> str:
    return f"{agent} / {measure} / {objective}"


def to_markdown(summaries: list[MethodSummary], scores: list[RunScore],
                left_out: list[str]) -> str:
    if not scores:
        lines = ["# Benchmark leaderboard", "",
                 "No run on a world with exact references: nothing is ranked."]
        if left_out:
            lines += ["", f"{len(left_out)} run(s) left out: " + "; ".join(left_out)]
        return "\n".join(lines) + "\n"
    worlds = sorted({run.world for run in scores})
    lines = [
        "# Benchmark leaderboard", "",
        f"{len(scores)} runs, {len(summaries)} methods, worlds: {', '.join(worlds)}.", "",
        "Score = (U - U_rand) / (U* - U_rand): 1 is the exact target of the objective "
        "(per_decision: the per-decision fixed point; static: the static optimum), 0 the "
        "uniform-random policy. IQM over worlds x seeds; the interval is a "
        f"{CONFIDENCE:.0%} stratified bootstrap CI only where every world has at least "
        f"{MIN_SEEDS_FOR_INTERVAL} seeds, else the range of the runs' scores "
        "(docs/results/benchmark.md).", "",
        "Where a target or the random policy's utility is an interval or an estimate "
        "(Targets, below), a run's true score is only known to lie between two ends: "
        "`score bounds` is the IQM of the runs' lowest and of their highest possible "
        "scores (`exact` where every figure is).", "",
        "| rank | agent | measure | objective | worlds | runs | IQM score | interval | "
        "interval is | score bounds | runs > 1 |",
        "|---:|---|---|---|---:|---:|---:|---|---|---|---:|",
    ]
    for rank, m in enumerate(summaries, 1):
        e = m.estimate
        lines.append(f"| {rank} | {m.agent} | {m.measure} | {m.objective} | {m.worlds} | "
                     f"{m.runs} | {e.iqm:.3f} | [{e.low:.3f}, {e.high:.3f}] | "
                     f"{m.interval_label} | {_bounds_text(m.bounds)} | {m.above_target} |")
    lines += ["", "## Per world (IQM of the seeds' scores)", "",
              "A cell whose figures are not all exact also gives the IQM of the lowest and "
              "highest possible scores.", "",
              "| method | " + " | ".join(worlds) + " |",
              "|---|" + "---:|" * len(worlds)]
    for m in summaries:
        cells = [(f"{m.world_iqm[w]:.3f}" + (f" {_bounds_text(m.world_bounds[w])}"
                                             if w in m.world_bounds else ""))
                 if w in m.world_iqm else "—" for w in worlds]
        lines.append(f"| {_method_name(m.agent, m.measure, m.objective)} | "
                     + " | ".join(cells) + " |")
    lines += ["", "## Targets", "", targets_markdown(scores)]
    notes = ["runs > 1: runs scoring above their target; with per_decision, a greedy policy "
             "whose start utility beats the fixed point's is not the per-decision solution.",
             "static: U is the Monte Carlo estimate of the learned policy's static utility "
             "(its standard error per run in scores.csv), so a run at the optimum scores 1 "
             "give or take that error; U* is the optimum over cell-Markov policies on the "
             "paper's grid worlds (a policy of the return so far can beat it); on a tabular "
             "world where it is an interval, U* is its lower end (a policy attains it)."]
    if left_out:
        notes.append(f"{len(left_out)} run(s) left out: " + "; ".join(left_out))
    lines += ["", "Notes:", ""] + [f"- {note}" for note in notes]
    return "\n".join(lines) + "\n"


def targets_markdown(scores: list[RunScore]) -> str:
    """What each world's targets are: per world, measure and objective, U* and U_rand with
    their kind and, where not exact, the interval that holds the true value."""
    def cell(value: float, kind: str, low: Optional[float], high: Optional[float]) -> str:
        if kind == "exact":
            return f"{value:.6g} (exact)"
        if low is None or high is None or not math.isfinite(low + high):
            return f"{value:.6g} ({kind}, no bound)"
        return f"{value:.6g} ({kind}: [{low:.6g}, {high:.6g}])"

    rows = {}
    for run in sorted(scores, key=lambda r: (r.world, r.measure, r.objective)):
        rows.setdefault((run.world, run.measure, run.objective), run)
    lines = ["Every target is exact (to float precision), an interval (its lower end attained "
             "by a policy; the score uses it) or an estimate (on a grid; its error bound "
             "where known). The per-decision target is the fixed point reached by policy "
             "iteration from the expectation-optimal policy.", "",
             "| world | measure | objective | U* | U_rand |", "|---|---|---|---|---|"]
    for (world, measure, objective), run in rows.items():
        lines.append(f"| {world} | {measure} | {objective} | "
                     f"{cell(run.target, run.target_kind, run.target_low, run.target_high)} | "
                     f"{cell(run.random, run.random_kind, run.random_low, run.random_high)} |")
    return "\n".join(lines)


def monte_carlo_markdown(summaries: list[MonteCarloSummary]) -> str:
    """The section of the worlds without exact references: one table per world."""
    lines = [
        "## Worlds without exact references (Monte Carlo)", "",
        "U, E and R_rho of the greedy policy's episode return S, in the world's units, from "
        "each run's final evaluation (eval.json); per method the IQM over its seeds, U's "
        f"interval a {CONFIDENCE:.0%} bootstrap CI from {MIN_SEEDS_FOR_INTERVAL} seeds on, "
        "else the range of the seeds. No exact target exists here, so these runs are not "
        "ranked with the scored ones; within a world, best U first.",
    ]
    for world in sorted({m.world for m in summaries}):
        lines += ["", f"### {world}", "",
                  "| method | seeds | IQM U | interval | interval is | IQM E | IQM R_rho | "
                  "episodes a run |",
                  "|---|---:|---:|---|---|---:|---:|---:|"]
        for m in (m for m in summaries if m.world == world):
            u = m.utility
            risk = "—" if m.risk_value is None else f"{m.risk_value:.4g}"
            lines.append(f"| {_method_name(m.agent, m.measure, m.objective)} | {m.seeds} | "
                         f"{u.iqm:.4g} | [{u.low:.4g}, {u.high:.4g}] | {m.interval_label} | "
                         f"{m.expectation:.4g} | {risk} | {m.episodes} |")
    return "\n".join(lines) + "\n"


def _csv(header: list[str], rows: Iterable[list[Any]]) -> str:
    buffer = io.StringIO()
    writer = csv.writer(buffer, lineterminator="\n")
    writer.writerow(header)
    writer.writerows(rows)
    return buffer.getvalue()


def leaderboard_csv(summaries: list[MethodSummary]) -> str:
    return _csv(["rank", "agent", "measure", "objective", "worlds", "runs", "fewest_seeds",
                 "iqm_score", "low", "high", "interval", "above_target"],
                ([rank, m.agent, m.measure, m.objective, m.worlds, m.runs, m.fewest_seeds,
                  m.estimate.iqm, m.estimate.low, m.estimate.high, m.interval_label,
                  m.above_target] for rank, m in enumerate(summaries, 1)))


def scores_csv(scores: list[RunScore]) -> str:
    fields = [field.name for field in dataclasses.fields(RunScore)]
    return _csv(fields + ["gap", "score", "score_low", "score_high"],
                ([*asdict(run).values(), run.gap, run.score,
                  *(run.score_interval or (None, None))] for run in scores))


def monte_carlo_csv(runs: list[MonteCarloRun]) -> str:
    return _csv([field.name for field in dataclasses.fields(MonteCarloRun)],
                (list(asdict(run).values()) for run in runs))


def plot_profiles(scores: list[RunScore], path: Path) -> None:
    """Performance profiles, one panel per objective: the share of runs scoring >= tau."""
    from rs_lightning.analysis.plots import _pyplot, _save

    plt = _pyplot()
    values = [run.score for run in scores]
    taus = np.linspace(min(0.0, min(values)), max(1.0, max(values)), PROFILE_POINTS)
    objectives = sorted({run.objective for run in scores})
    # one colour per agent and measure, the same in every panel
    methods = sorted({(run.agent, run.measure) for run in scores})
    colours = {method: f"C{i % 10}" for i, method in enumerate(methods)}
    figure, axes = plt.subplots(1, len(objectives), figsize=(6 * len(objectives), 4.2),
                                squeeze=False, sharey=True)
    for axis, objective in zip(axes[0], objectives):
        profile = performance_profile([r for r in scores if r.objective == objective], taus)
        for (agent, measure, _), shares in profile.items():
            axis.plot(taus, shares, label=f"{agent} / {measure}",
                      color=colours[(agent, measure)])
        axis.axvline(1.0, color="grey", linewidth=0.8, linestyle=":")
        axis.set_title(f"objective={objective}")
        axis.set_xlabel("normalised score tau (1: the exact target, 0: random policy)")
        axis.legend(fontsize=7)
    axes[0][0].set_ylabel("share of runs with score >= tau")
    _save(figure, path)


def write_leaderboard(sweep_dir: Path, out: Optional[Path] = None,
                      more: Iterable[Path] = ()) -> str:
    """Score the runs below ``sweep_dir`` (and the ``more`` sweep folders) and write the
    leaderboard files into ``out`` (default: ``sweep_dir``); returns the Markdown.
    FileNotFoundError without a finished run to show."""
    folders = [Path(sweep_dir), *map(Path, more)]
    collected = collect_runs(*folders)
    scores, left_out = collected.scores, collected.left_out
    for line in left_out:
        print(f"warning: benchmark: left out {line}", file=sys.stderr)
    if not scores and not collected.monte_carlo:
        raise FileNotFoundError(f"no finished run in {', '.join(map(str, folders))}")
    summaries = summarize(scores)
    markdown = to_markdown(summaries, scores, left_out)
    if collected.monte_carlo:
        markdown += "\n" + monte_carlo_markdown(summarize_monte_carlo(collected.monte_carlo))
    out = Path(out or sweep_dir)
    out.mkdir(parents=True, exist_ok=True)
    write_text_atomic(out / "leaderboard.md", markdown)
    write_text_atomic(out / "leaderboard.csv", leaderboard_csv(summaries))
    write_text_atomic(out / "scores.csv", scores_csv(scores))
    if scores:
        plot_profiles(scores, out / "profiles.png")
    if collected.monte_carlo:
        write_text_atomic(out / MONTE_CARLO_FILE, monte_carlo_csv(collected.monte_carlo))
    return markdown


def log_leaderboard_to_wandb(sweep_dir: Path, mode: str = "offline",
                             project: str = "rs-lightning", entity: Optional[str] = None
                             ) -> str:
    """Log the leaderboard files of ``sweep_dir`` (written by :func:`write_leaderboard`) to
    a W&B run of job type ``benchmark``: the ranked methods and every run's score as tables,
    the profiles as an image. The run's id depends on the project and the sweep folder's
    name, so a rerun replaces it rather than adding another. ``mode``: ``offline`` or
    ``online`` (offline instead when online fails). Returns the run's local folder;
    FileNotFoundError where the leaderboard has not been written."""
    import hashlib

    import wandb

    from rs_lightning.analysis.wandb_support import init_wandb_run

    sweep_dir = Path(sweep_dir)
    tables = {name: list(csv.reader(io.StringIO((sweep_dir / f"{name}.csv").read_text())))
              for name in ("leaderboard", "scores", "monte_carlo")
              if (sweep_dir / f"{name}.csv").is_file()}
    key = f"{entity or ''}/{project}/{sweep_dir.name}"
    run = init_wandb_run(
        mode, project=project, entity=entity, group=sweep_dir.name, job_type="benchmark",
        name=f"benchmark-{sweep_dir.name}",
        id="benchmark-" + hashlib.sha1(key.encode()).hexdigest()[:16], dir=str(sweep_dir),
        config={"sweep_dir": str(sweep_dir), "runs": len(tables["scores"]) - 1},
        **({"resume": "allow"} if mode == "online" else {}))
    media: dict[str, Any] = {name: wandb.Table(columns=header, data=rows)
                             for name, (header, *rows) in tables.items()}
    if (sweep_dir / "profiles.png").is_file():
        media["profiles"] = wandb.Image(str(sweep_dir / "profiles.png"),
                                        caption="performance profiles")
    run.log(media)
    folder = run.dir
    run.finish()
    return str(Path(folder).parent)
