"""Episodes of a trained agent's greedy policy as pictures: the frames of each step, from the
environment's own ``rgb_array`` renderer (classic control, Box2D, MuJoCo, gymnasium's toy
text) or, for a world that draws itself only as text (the grid worlds' ``ansi``), its
characters as coloured cells; written as a GIF (Pillow) or an MP4 (imageio with ffmpeg)."""

from __future__ import annotations

import copy
import os
from pathlib import Path

import numpy as np

from rs_lightning.analysis.evaluation import EPISODE_STEP_CAP, episode_seeds

# The grid worlds' text cells: the agent, goals, the trap, empty cells.
CELL_COLOURS = {"A": (31, 119, 180), "G": (44, 160, 44), "T": (214, 39, 40), ".": (235, 235, 235)}
CELL_PIXELS = 64
VIDEO_SUFFIXES = (".gif", ".mp4")


def headless_rendering() -> None:
    """Without a display, MuJoCo draws through EGL (headless OpenGL) and pygame (classic
    control, Box2D) on SDL's off-screen driver, which draws the same pictures without
    looking for a display (and saying so on stderr), unless told otherwise."""
    if not os.environ.get("DISPLAY") and not os.environ.get("WAYLAND_DISPLAY"):
        os.environ.setdefault("MUJOCO_GL", "egl")
        os.environ.setdefault("SDL_VIDEODRIVER", "dummy")


def env_metadata(env_id: str) -> dict:
    """The registered environment class's ``metadata`` (render modes, frames per second),
    read without making one."""
    import gymnasium as gym

    from rs_lightning.envs.gym_support import register_optional_envs

    register_optional_envs(env_id)
    entry = gym.spec(env_id).entry_point
    env_class = gym.envs.registration.load_env_creator(entry) if isinstance(entry, str) else entry
    return dict(getattr(env_class, "metadata", {}) or {})


def render_mode(env_id: str) -> str:
    """``rgb_array`` where the environment draws pictures, else ``ansi`` (drawn here); a
    ValueError in one line for one that draws neither."""
    available = env_metadata(env_id).get("render_modes", [])
    for mode in ("rgb_array", "ansi"):
        if mode in available:
            return mode
    raise ValueError(f"{env_id} draws no pictures (its render modes: "
                     f"{', '.join(available) or 'none'}), so its episodes cannot be recorded")


def text_frame(text: str) -> np.ndarray:
    """A grid world's ``ansi`` picture (a line per row) as an image ``[H, W, 3]``."""
    rows = [line for line in text.split("\n") if line]
    frame = np.zeros((len(rows) * CELL_PIXELS, len(rows[0]) * CELL_PIXELS, 3), dtype=np.uint8)
    for y, line in enumerate(rows):
        for x, char in enumerate(line):
            frame[y * CELL_PIXELS:(y + 1) * CELL_PIXELS, x * CELL_PIXELS:(x + 1) * CELL_PIXELS] = (
                CELL_COLOURS.get(char, (120, 120, 120)))
    # Grid lines between the cells.
    frame[::CELL_PIXELS] = 255
    frame[:, ::CELL_PIXELS] = 255
    return frame


def record_episodes(agent, episodes: int, seed: int | None = None,
                    max_steps: int = EPISODE_STEP_CAP) -> list[np.ndarray]:
    """The frames of ``episodes`` episodes of ``agent``'s greedy policy (a
    :class:`~rs_lightning.analysis.api.TrainedAgent`), reset with the seeds the run's
    evaluation uses, one frame before the first step and one after each (of at most
    ``max_steps`` steps an episode)."""
    from rs_lightning.envs.factory import make_env

    train = agent.config.train
    mode = render_mode(train.env.id)
    env_config = copy.deepcopy(train.env)
    env_config.kwargs = {**(env_config.kwargs or {}), "render_mode": mode}
    env = make_env(env_config)
    seeds = episode_seeds(train.seed if seed is None else seed, episodes)
    frames: list[np.ndarray] = []

    def picture() -> np.ndarray:
        drawn = env.render()
        return text_frame(drawn) if mode == "ansi" else np.asarray(drawn, dtype=np.uint8)

    try:
        for episode_seed in seeds:
            obs, _ = env.reset(seed=int(episode_seed))
            frames.append(picture())
            for _ in range(max_steps):
                action = agent.act(np.asarray(obs, dtype=np.float32)[None])[0]
                obs, _, terminated, truncated, _ = env.step(action if agent.continuous
                                                            else int(action))
                frames.append(picture())
                if terminated or truncated:
                    break
    finally:
        env.close()
    return frames


def check_video_writer(path: Path) -> None:
    """ValueError in one line where ``path``'s format cannot be written here: an MP4 needs
    the optional extra ``video`` (imageio and its ffmpeg binary); a GIF needs Pillow alone."""
    if Path(path).suffix != ".mp4":
        return
    import importlib.util

    missing = [name for name in ("imageio", "imageio_ffmpeg")
               if importlib.util.find_spec(name) is None]
    if missing:
        raise ValueError(f"--out {path}: an MP4 needs the optional extra 'video' "
                         f"(pip install 'rs-lightning[video]'; missing: {', '.join(missing)}); "
                         "a .gif needs nothing more")


def write_video(frames: list[np.ndarray], path: Path, fps: int) -> None:
    """``frames`` as a GIF (Pillow, nothing else needed) or an MP4 (H.264, through imageio's
    ffmpeg plugin: :func:`check_video_writer` says when it is missing)."""
    path = Path(path)
    if path.suffix == ".mp4":
        check_video_writer(path)
        import imageio.v3 as iio

        # Even sizes suit H.264's 4:2:0 pictures; imageio's default block of 16 would
        # stretch a 600 x 400 Box2D frame.
        iio.imwrite(path, np.stack(frames), plugin="FFMPEG", fps=fps, codec="libx264",
                    macro_block_size=2)
        return
    from PIL import Image

    images = [Image.fromarray(frame) for frame in frames]
    images[0].save(path, save_all=True, append_images=images[1:],
                   duration=max(1, round(1000 / fps)), loop=0)
