"""``rs-lightning benchmark``: the risk-sensitive benchmark suite in one command.

It launches one Hydra multirun of ``rs-lightning train`` over worlds x agents x measures x
objectives (``experiment=benchmark_<preset>``, ``conf/experiment/``: every default is
there), any launcher included (``hydra/launcher=joblib`` and other overrides pass through),
and when the sweep ends its leaderboard is written into the sweep folder
(:mod:`rs_lightning.analysis.benchmark`). The same command again resumes the sweep: finished
jobs are skipped, interrupted ones resume (docs/guides/resume.md).
"""

from __future__ import annotations

import argparse
import shlex
import signal
import sys
import time
from pathlib import Path

import yaml

from rs_lightning.app.signals import exit_status, run_child
from rs_lightning.config import CONF_DIR
from rs_lightning.errors import EXIT_BAD_INPUT

PRESET_PREFIX = "benchmark_"
DEFAULT_PRESET = "small"
# flag -> (the preset's sweeper key, what one value is)
FLAGS = {"--worlds": ("env", "world"), "--agents": ("agent", "agent"),
         "--measures": ("risk", "measure"), "--objectives": ("objective", "objective")}


class BadInput(ValueError):
    """A flag's value the benchmark refuses; the message starts with the flag."""


def presets() -> list[str]:
    return sorted(p.stem[len(PRESET_PREFIX):]
                  for p in CONF_DIR.glob(f"experiment/{PRESET_PREFIX}*.yaml"))


def read_preset(name: str) -> dict:
    """The preset's YAML (``conf/experiment/benchmark_<name>.yaml``) as a mapping."""
    if name not in presets():
        raise BadInput(f"--preset: no preset {name!r}; allowed: {', '.join(presets())}")
    return yaml.safe_load((CONF_DIR / "experiment" / f"{PRESET_PREFIX}{name}.yaml").read_text())


def _names(value) -> list[str]:
    return [v.strip() for v in str(value).split(",") if v.strip()]


def allowed_values(preset: dict) -> dict[str, list[str]]:
    """What each flag accepts: the preset's worlds (the suite: ``hydra.sweeper.params.env``),
    the agents of discrete actions, the measures with exact references on every world, the
    objectives the leaderboard scores."""
    from rs_lightning.agents import AGENTS  # the package registers every agent
    from rs_lightning.analysis.benchmark import SCORED_KEYS
    from rs_lightning.references.exact_policies import CLOSED_FORM_RISKS
    from rs_lightning.references.tabular_references import REFERENCE_RISKS

    agents = [p.stem for p in sorted(CONF_DIR.glob("agent/*.yaml"))
              if p.stem in AGENTS and not AGENTS[p.stem][0].continuous_actions]
    measures = [p.stem for p in sorted(CONF_DIR.glob("risk/*.yaml"))
                if p.stem in CLOSED_FORM_RISKS and p.stem in REFERENCE_RISKS]
    return {"--worlds": _names(preset["hydra"]["sweeper"]["params"]["env"]),
            "--agents": agents, "--measures": measures, "--objectives": list(SCORED_KEYS)}


def parser() -> argparse.ArgumentParser:
    tool = argparse.ArgumentParser(
        description="Train the risk-sensitive benchmark suite (one Hydra multirun) and write "
                    "its leaderboard: leaderboard.md / .csv, scores.csv, profiles.png.",
        epilog="Each list is comma-separated, e.g. --agents c51,iqn; left out, the preset's. "
               "The same command again resumes the sweep. Example: rs-lightning benchmark "
               "hydra/launcher=joblib hydra.launcher.n_jobs=2")
    tool.add_argument("--preset", default=DEFAULT_PRESET,
                      help="conf/experiment/benchmark_<preset>.yaml (default: %(default)s)")
    tool.add_argument("--worlds", help="tabular worlds (default: the preset's suite)")
    tool.add_argument("--agents", help="discrete-action agents (default: the preset's)")
    tool.add_argument("--measures", help="risk measures with exact references (default: the "
                                         "preset's)")
    tool.add_argument("--objectives", help="per_decision, static (default: the preset's)")
    tool.add_argument("--seeds", type=int, help="seeds 0..N-1, the members of each run "
                                                "(parallel_seeds; default: the preset's)")
    tool.add_argument("--out", type=Path, help="the sweep folder (default: the preset's "
                                               "hydra.sweep.dir); with --score, where the "
                                               "leaderboard goes (default: the first folder)")
    tool.add_argument("--score", type=Path, nargs="+", metavar="SWEEP",
                      help="train nothing: write the leaderboard of these finished sweep "
                           "folders (any worlds: those without exact references get their "
                           "Monte Carlo table), e.g. sweeps of experiment=risky_navigation")
    tool.add_argument("--wandb", choices=("offline", "online", "off"), default="offline",
                      help="log the leaderboard to a W&B run (default: %(default)s; online "
                           "falls back to offline when the server cannot be reached)")
    tool.add_argument("overrides", nargs="*", metavar="OVERRIDE",
                      help="more Hydra overrides for rs-lightning train, e.g. "
                           "hydra/launcher=joblib")
    return tool


def check_flag_overrides(overrides: list[str]) -> None:
    """BadInput for an override of what a flag sets (``agent=iqn``: ``--agents``), which the
    flag's value, given or the preset's, would contradict."""
    owners = {key: flag for flag, (key, _) in FLAGS.items()}
    owners.update({"parallel_seeds": "--seeds", "hydra.sweep.dir": "--out",
                   "experiment": "--preset"})
    for override in overrides:
        key, _, value = override.lstrip("+~").partition("=")
        key = key.removeprefix("hydra.sweeper.params.")
        if key in owners:
            value = value.removeprefix(PRESET_PREFIX) if key == "experiment" else value
            raise BadInput(f"{override}: the benchmark sets {key} by {owners[key]}, whose "
                           "value (given or the preset's) this override would contradict; "
                           f"write {owners[key]} {value or '...'}")


def train_command(args: argparse.Namespace) -> list[str]:
    """The ``rs-lightning train -m ...`` command line of the benchmark ``args`` ask for;
    BadInput naming the flag and the allowed values for a value it refuses."""
    from rs_lightning.app.run_folders import check_sweep_folder
    from rs_lightning.config.schema import MAX_PARALLEL_SEEDS, objective_refusal
    from rs_lightning.errors import ConfigError

    check_flag_overrides(args.overrides)
    preset = read_preset(args.preset)
    allowed = allowed_values(preset)
    sweep = preset["hydra"]["sweeper"]["params"]
    overrides = [f"experiment={PRESET_PREFIX}{args.preset}"]
    chosen = {}
    for flag, (key, what) in FLAGS.items():
        given = getattr(args, flag[2:])
        chosen[flag] = _names(given if given is not None else sweep[key])
        unknown = [name for name in chosen[flag] if name not in allowed[flag]]
        if unknown or not chosen[flag]:
            problem = f"no {what} {unknown[0]!r}" if unknown else "empty"
            raise BadInput(f"{flag}: {problem}; allowed: {', '.join(allowed[flag])}")
        overrides.append(f"{key}={','.join(chosen[flag])}")
    refusals = [objective_refusal(agent, objective) for agent in chosen["--agents"]
                for objective in chosen["--objectives"]]
    if all(refusals):  # the sweep would leave out every job
        raise BadInput(f"--objectives: no job is left with these --agents: {refusals[0]}")
    seeds = args.seeds if args.seeds is not None else int(preset["parallel_seeds"])
    if not 1 <= seeds <= MAX_PARALLEL_SEEDS:
        raise BadInput(f"--seeds: {seeds}; allowed: a whole number from 1 to "
                       f"{MAX_PARALLEL_SEEDS} (the bound of parallel_seeds)")
    overrides.append(f"parallel_seeds={seeds}")
    out = args.out if args.out is not None else preset["hydra"]["sweep"]["dir"]
    try:
        check_sweep_folder(out, "--out")
    except ConfigError as error:
        raise BadInput(str(error)) from None
    overrides.append(f"hydra.sweep.dir={out}")
    # The installed command (rs-lightning train), not a checkout's train.py.
    return [sys.executable, "-m", "rs_lightning", "train", "-m", *overrides, *args.overrides]


def score(args: argparse.Namespace) -> int:
    """``--score``: the leaderboard of finished sweeps, nothing trained."""
    from rs_lightning.analysis.benchmark import write_leaderboard

    training = [flag for flag in (*FLAGS, "--seeds") if getattr(args, flag[2:]) is not None]
    if training or args.overrides:
        given = ", ".join(training + args.overrides)
        print(f"error: --score: trains nothing, so {given} would be ignored; score without "
              "them, or train without --score", file=sys.stderr)
        return EXIT_BAD_INPUT
    first, *more = args.score
    try:
        write_leaderboard(first, out=args.out, more=more)
    except FileNotFoundError as error:
        print(f"error: --score: {error}", file=sys.stderr)
        return EXIT_BAD_INPUT
    out = args.out or first
    print(f"[rs_lightning] benchmark: leaderboard in {out / 'leaderboard.md'}", file=sys.stderr)
    log_to_wandb(out, args.wandb)
    return 0


def log_to_wandb(sweep_dir: Path, mode: str) -> None:
    if mode == "off":
        return
    from rs_lightning.analysis.benchmark import log_leaderboard_to_wandb

    folder = log_leaderboard_to_wandb(sweep_dir, mode)
    print(f"[rs_lightning] benchmark: W&B run ({mode}): {folder}", file=sys.stderr)


def main(argv: list[str] | None = None) -> int:
    args = parser().parse_args(argv)
    if args.score:
        return score(args)
    try:
        command = train_command(args)
    except BadInput as error:
        print(f"error: {error}", file=sys.stderr)
        return EXIT_BAD_INPUT
    print("[rs_lightning] benchmark: " + " ".join(command[1:]), file=sys.stderr)
    start = time.monotonic()
    # In the caller's folder, as `python train.py` would be: relative paths mean the same.
    # A signal is passed on to the sweep, whose runs save their state and stop.
    status, stopped_by = run_child(command)
    sweep_dir = Path(next(o for o in command if o.startswith("hydra.sweep.dir=")).split("=", 1)[1])
    if stopped_by is not None:
        again = shlex.join(["rs-lightning", "benchmark", *(sys.argv[1:] if argv is None else argv)])
        # Killed (137): after the grace period or a second signal; the last checkpoints stay.
        how = ("killed; its runs resume from their last checkpoints" if status == 137
               else "stopped with its runs' state saved")
        print(f"Stopped by {signal.Signals(stopped_by).name}: the sweep in {sweep_dir} {how}; "
              f"the same command resumes it: {again}", file=sys.stderr)
        return exit_status(stopped_by)
    leaderboard = sweep_dir / "leaderboard.md"
    minutes = (time.monotonic() - start) / 60
    if leaderboard.is_file() and status in (0, 1):  # 1: some jobs failed, the rest scored
        print(f"[rs_lightning] benchmark: {minutes:.1f} min; leaderboard in {leaderboard}",
              file=sys.stderr)
        log_to_wandb(sweep_dir, args.wandb)
    return status


if __name__ == "__main__":
    raise SystemExit(main())
