"""``rs-lightning record``: episodes of a finished run's greedy policy as a GIF or an MP4
(:mod:`rs_lightning.analysis.recording` draws them).

The run is checked as ``evaluate`` checks it (a finished run only, not one another process
holds; :mod:`rs_lightning.app.finished_runs`), and the setting as ``evaluate`` parses it,
before anything is played or written.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from rs_lightning.analysis.api import TrainedAgent
from rs_lightning.analysis.evaluation import check_episodes, check_setting
from rs_lightning.analysis.recording import (
    VIDEO_SUFFIXES,
    check_video_writer,
    env_metadata,
    headless_rendering,
    record_episodes,
    render_mode,
    write_video,
)
from rs_lightning.analysis.runs import load_run
from rs_lightning.app.commands.evaluation import split_arguments
from rs_lightning.app.finished_runs import check_finished, holding

MAX_EPISODES = 100


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        description="Record episodes of a finished run's greedy policy (at its own setting, or "
                    "another one) as a GIF or an MP4: the environment's own pictures "
                    "(classic control, Box2D, MuJoCo), the grid worlds drawn as cells.")
    parser.add_argument("run_and_setting", nargs="+", metavar="run_dir_or_setting",
                        help="a finished run folder (a seed of a several-seed run: "
                        "<run>/seed_<s>), then optionally a setting: alpha=0.3 rho=0.05")
    parser.add_argument("--episodes", type=int, default=1,
                        help=f"episodes played one after the other (1 to {MAX_EPISODES}; "
                        "default 1), reset with the seeds of the run's evaluation")
    parser.add_argument("--out", type=Path,
                        help="the file, .gif (default <run>/episodes.gif) or .mp4 (needs "
                        "the optional extra 'video')")
    parser.add_argument("--fps", type=int, default=None,
                        help="frames per second (default: the environment's, else 30)")
    args = parser.parse_args(argv)
    headless_rendering()
    try:
        run_dirs, setting = split_arguments(args.run_and_setting)
        if len(run_dirs) != 1:
            raise ValueError(f"record takes one run folder, got {len(run_dirs)}: "
                             f"{', '.join(map(str, run_dirs))}")
        (run_dir,) = run_dirs
        check_episodes(args.episodes, "--episodes")
        if args.episodes > MAX_EPISODES:
            raise ValueError(f"--episodes: at most {MAX_EPISODES} (one file holds them all), "
                             f"got {args.episodes}")
        if args.fps is not None and not 1 <= args.fps <= 240:
            raise ValueError(f"--fps: must be in [1, 240], got {args.fps}")
        out = args.out if args.out is not None else run_dir / "episodes.gif"
        if out.suffix not in VIDEO_SUFFIXES:
            raise ValueError(f"--out {out}: must end in {' or '.join(VIDEO_SUFFIXES)}")
        check_video_writer(out)
        with holding([run_dir]):
            check_finished(run_dir)
            if not out.parent.is_dir():
                raise ValueError(f"--out {out}: the folder {out.parent} does not exist")
            run = load_run(run_dir)
            if not run.module.objective.observation_markov:
                raise ValueError(f"{run_dir}: objective={run.run_config.train.objective} acts on "
                                 "the return so far as well as the observation; record plays "
                                 "policies of the observation alone")
            policy = check_setting(run, setting) if setting else run.module
            render_mode(run.run_config.train.env.id)  # one that draws nothing: refused first
            agent = TrainedAgent(policy, run)
            frames = record_episodes(agent, args.episodes)
            fps = args.fps or int(env_metadata(run.run_config.train.env.id).get("render_fps")
                                  or 30)
            write_video(frames, out, fps)
    except (FileNotFoundError, ValueError) as error:
        print(f"error: {error}", file=sys.stderr)
        return 2
    print(f"{out}: {args.episodes} episode{'s' if args.episodes > 1 else ''}, {len(frames)} "
          f"frames at {fps} per second")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
