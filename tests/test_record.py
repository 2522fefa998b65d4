"""rs-lightning record: a finished run's greedy policy as a GIF, on a grid world (drawn from
its text picture), Pendulum (classic control) and LunarLander (Box2D) from their renderers;
unfinished runs and bad arguments refused in one line before anything is written."""

from __future__ import annotations

import numpy as np
import pytest
from PIL import Image

from rs_lightning.app.commands.record import main as record
from rs_lightning.app.train import run


def gif_frames(path) -> list[np.ndarray]:
    frames = []
    with Image.open(path) as gif:
        for index in range(gif.n_frames):
            gif.seek(index)
            frames.append(np.asarray(gif.convert("RGB")))
    return frames


BAD = [
    (["--episodes", "0"], "--episodes"),
    (["--episodes", "101"], "--episodes: at most 100"),
    (["--out", "x.avi"], "must end in .gif or .mp4"),
    (["--fps", "0"], "--fps"),
    (["beta=2"], "beta: not a setting of risk=var; allowed: alpha, rho"),
]


def test_a_grid_world_run_is_drawn_cell_by_cell_and_bad_input_refused(compose, tmp_path,
                                                                      capsys):
    grid_run = tmp_path / "grid"
    run(compose(["agent=dqn", "debug=quick", "logger=none", "callbacks.progress_bar=false",
                 "trainer.max_steps=60", "evaluation.episodes=20", "evaluation.every_n_steps=0"]),
        grid_run)
    capsys.readouterr()
    assert record([str(grid_run), "--episodes", "2"]) == 0
    frames = gif_frames(grid_run / "episodes.gif")
    line = capsys.readouterr().out
    assert line.startswith(f"{grid_run / 'episodes.gif'}: 2 episodes, ")
    # A GIF keeps a still picture (a step into a wall) as one longer frame.
    assert int(line.split(", ")[1].split()[0]) >= len(frames) > 2
    assert frames[0].shape == (192, 192, 3)  # 3 x 3 cells of 64 pixels
    # The agent (blue) starts at the start cell, below the middle, and moves.
    agent = [tuple(np.argwhere((f == (31, 119, 180)).all(axis=2)).mean(axis=0) // 64)
             for f in frames]
    assert agent[0] == (2, 1) and len(set(agent)) > 1

    for arguments, message in BAD:
        assert record([str(grid_run), *arguments]) == 2
        (line,) = capsys.readouterr().err.strip().splitlines()
        assert line.startswith("error: ") and message in line, line
    assert not list(grid_run.glob("*.avi"))

    # An MP4 (H.264 through imageio's ffmpeg plugin) holds every frame the line counts.
    import imageio.v3 as iio

    clip = tmp_path / "clip.mp4"
    assert record([str(grid_run), "--episodes", "2", "--out", str(clip)]) == 0
    counted = int(capsys.readouterr().out.split(", ")[1].split()[0])
    movie = iio.imread(clip, plugin="FFMPEG")
    assert movie.shape == (counted, 192, 192, 3)
    # The first picture is the start: the blue agent's cell below the middle (H.264 blurs
    # colours a little, so the nearest of the cell colours decides).
    middle_bottom = movie[0, 128 + 32, 64 + 32].astype(int)
    assert np.abs(middle_bottom - (31, 119, 180)).max() < 40

    unfinished = tmp_path / "unfinished"
    unfinished.mkdir()
    (unfinished / "config.yaml").write_text((grid_run / "config.yaml").read_text())
    assert record([str(unfinished)]) == 2
    assert "the run has not finished" in capsys.readouterr().err
    assert not (unfinished / "episodes.gif").exists()


@pytest.mark.parametrize("env, agent", [("pendulum", "dsac"), ("lunar_lander", "dqn")])
def test_a_gymnasium_world_is_recorded_from_its_own_renderer(compose, tmp_path, env, agent):
    run(compose([f"agent={agent}", f"env={env}", "debug=quick", "logger=none",
                 "callbacks.progress_bar=false", "trainer.max_steps=40",
                 "learning.warmup_steps=20", "evaluation.episodes=1",
                 "evaluation.episodes_during_training=1", "evaluation.every_n_steps=0"]),
        tmp_path)
    out = tmp_path / "clip.gif"
    assert record([str(tmp_path), "--out", str(out)]) == 0
    frames = gif_frames(out)
    assert len(frames) > 10 and frames[0].shape[2] == 3
    assert len({frame.tobytes() for frame in frames}) > 1  # it moves


def test_the_final_evaluation_logs_an_episode_video_to_an_offline_wandb_run(compose, tmp_path,
                                                                           capsys):
    """logger=wandb (offline) with logger.video (the default): one episode of the greedy
    policy, drawn as record draws it, kept in the run folder and in the W&B run's media."""
    from tests.wandb_files import summary

    quick = ["agent=dqn", "debug=quick", "logger=wandb", "callbacks.progress_bar=false",
             "trainer.max_steps=60", "evaluation.episodes=20", "evaluation.every_n_steps=0"]
    run(compose(quick), tmp_path / "run")
    gif = tmp_path / "run" / "episode.gif"
    frames = gif_frames(gif)
    assert frames[0].shape == (192, 192, 3) and len(frames) >= 2
    (offline,) = (tmp_path / "run" / "wandb").glob("offline-run-*")
    (logged,) = offline.glob("files/media/videos/eval/episode_*.gif")
    assert logged.read_bytes() == gif.read_bytes()
    assert summary(offline)["eval/episode/_type"] == "video-file"

    run(compose([*quick, "logger.video=false"]), tmp_path / "off")
    assert not (tmp_path / "off" / "episode.gif").exists()
    (offline,) = (tmp_path / "off" / "wandb").glob("offline-run-*")
    assert not list(offline.glob("files/media/videos/**/*"))
    capsys.readouterr()

    # A world that draws no pictures: a note of one line, and the run's outputs complete.
    run(compose(["agent=dsac", "env=risky_navigation", "debug=quick", "logger=wandb",
                 "callbacks.progress_bar=false", "trainer.max_steps=40",
                 "learning.warmup_steps=20", "evaluation.episodes=5",
                 "evaluation.every_n_steps=0"]), tmp_path / "blind")
    notes = [line for line in capsys.readouterr().err.splitlines() if "logger.video" in line]
    assert notes == ["note: logger.video: rs_lightning/RiskyNavigation-v0 draws no pictures "
                     "(its render modes: none), so its episodes cannot be recorded; no episode "
                     "video is logged"]
    assert (tmp_path / "blind" / "eval.json").is_file()
    assert not (tmp_path / "blind" / "episode.gif").exists()


def test_an_mp4_without_the_video_extra_is_one_line_naming_it(tmp_path, monkeypatch, capsys):
    import sys

    monkeypatch.setitem(sys.modules, "imageio_ffmpeg", None)  # as where it is not installed
    run_dir = tmp_path / "run"
    run_dir.mkdir()
    assert record([str(run_dir), "--out", str(tmp_path / "x.mp4")]) == 2
    assert capsys.readouterr().err.splitlines() == [
        f"error: --out {tmp_path / 'x.mp4'}: an MP4 needs the optional extra 'video' (pip "
        "install 'rs-lightning[video]'; missing: imageio_ffmpeg); a .gif needs nothing more"]
