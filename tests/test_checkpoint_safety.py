"""Checkpoints are data, never code: poisoned checkpoints (a pickle in a bytes field, a whole
file pickled, an object saved by torch) are refused with one line and exit status 2, given as
``ckpt_path=`` or found in a run folder, and nothing in them runs. Environment copies store
their state as tensors, numbers and strings and resume exactly from it."""

from __future__ import annotations

import io
import json
import pickle
import shutil
import subprocess
from pathlib import Path

import gymnasium as gym
import numpy as np
import pytest
import torch
from omegaconf import OmegaConf

from rs_lightning.app.train import run
from rs_lightning.engine.build import AtomicCheckpointIO
from rs_lightning.engine.checkpoints import (
    DATAMODULE,
    UnsafeCheckpoint,
    newest_checkpoint,
    read_checkpoint,
)
from rs_lightning.envs.copies import GymCopies
from rs_lightning.envs.plain_state import (
    UncapturableState,
    capture_state,
    restore_state,
)
from rs_lightning.errors import ConfigError
from tests.conftest import CONF, ROOT
from tests.warm_python import command as python_command

# A CartPole run (environment copies through gymnasium) that writes a checkpoint at step 40.
GYM_RUN = ["env=cartpole", "env.num_envs=2", "agent=dqn", "logger=none",
           "callbacks.progress_bar=false", "trainer.max_steps=60", "learning.warmup_steps=10",
           "trainer.checkpoint_every_n_steps=40", "evaluation.every_n_steps=0",
           "evaluation.episodes=5"]


class CreatesMarker:
    """Unpickling this creates a file: the proof that a checkpoint ran code."""

    def __init__(self, marker: Path) -> None:
        self.marker = marker

    def __reduce__(self):
        return (open, (str(self.marker), "w"))


def contains_bytes(node) -> bool:
    if isinstance(node, (bytes, bytearray)):
        return True
    if isinstance(node, dict):
        return any(contains_bytes(v) for v in node.values())
    if isinstance(node, (list, tuple)):
        return any(contains_bytes(v) for v in node)
    return False


@pytest.fixture(scope="module")
def gym_run(tmp_path_factory):
    """(run folder, its config overrides) of a finished CartPole run with checkpoints."""
    from hydra import compose, initialize_config_dir

    folder = tmp_path_factory.mktemp("gym_run")
    with initialize_config_dir(config_dir=str(CONF), version_base="1.3"):
        cfg = compose(config_name="train", overrides=GYM_RUN)
    run(cfg, run_dir=folder)
    return folder


def poisoned_files(source: Path, marker: Path, folder: Path) -> dict[str, Path]:
    """Variants of the real checkpoint ``source`` that would create ``marker`` if unpickled."""
    payload = pickle.dumps(CreatesMarker(marker))
    folder.mkdir(parents=True, exist_ok=True)
    files = {}
    state = torch.load(source, weights_only=True)
    # Where earlier versions kept the pickled environments.
    state[DATAMODULE]["collector"]["copies"]["groups"] = [payload]
    files["bytes in the env copies"] = folder / "env_bytes.ckpt"
    torch.save(state, files["bytes in the env copies"])
    state = torch.load(source, weights_only=True)
    state["rs_lightning"]["behaviour"]["epsilon_note"] = payload  # any field at all
    files["bytes in any field"] = folder / "any_bytes.ckpt"
    torch.save(state, files["bytes in any field"])
    files["whole file pickled"] = folder / "whole.ckpt"
    # Protocol 2, so that the unpickler gets as far as the global it would call.
    files["whole file pickled"].write_bytes(pickle.dumps(CreatesMarker(marker), protocol=2))
    # Protocol 4 (pickle's default), which the loader stops at before any global.
    files["whole file pickled, protocol 4"] = folder / "whole4.ckpt"
    files["whole file pickled, protocol 4"].write_bytes(pickle.dumps(CreatesMarker(marker), protocol=4))
    state = torch.load(source, weights_only=True)
    state["extra"] = CreatesMarker(marker)  # torch.save pickles the object into its archive
    files["an object in torch's archive"] = folder / "object.ckpt"
    torch.save(state, files["an object in torch's archive"])
    return files


def train_command(run_dir: Path, *overrides: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [*python_command(), "train.py", *GYM_RUN, f"hydra.run.dir={run_dir}", *overrides],
        cwd=ROOT, capture_output=True, text=True, timeout=300, check=False,
    )


def one_line(stderr: str) -> str:
    lines = [line for line in stderr.splitlines() if line.strip()]
    assert len(lines) == 1, stderr
    return lines[0]


# ----------------------------------------------------------------------------- the state
def test_a_checkpoint_holds_no_bytes_and_loads_with_weights_only(gym_run):
    state = torch.load(gym_run / "checkpoints" / "last.ckpt", weights_only=True)
    copies = state[DATAMODULE]["collector"]["copies"]
    assert "envs" in copies and len(copies["envs"]) == 2
    assert not contains_bytes(state)


@pytest.mark.parametrize("preset", ["cartpole", "cliff_walking", "frozen_lake"])
def test_env_copies_resume_exactly_from_their_plain_state(preset):
    config = OmegaConf.load(CONF / "env" / f"{preset}.yaml")
    config.num_envs = 2
    rng = np.random.default_rng(0)
    first = GymCopies(config, [3, 4, 5, 6], groups=2)
    for _ in range(40):
        first.step(rng.integers(0, 2, 4))
    buffer = io.BytesIO()
    torch.save(first.state_dict(), buffer)
    buffer.seek(0)
    state = torch.load(buffer, weights_only=True)
    assert not contains_bytes(state)
    second = GymCopies(config, [3, 4, 5, 6], groups=2)
    assert second.load_state_dict(state) is False  # restored, not restarted
    for _ in range(300):  # through several episode ends and resets
        actions = rng.integers(0, 2, 4)
        for a, b in zip(first.step(actions), second.step(actions)):
            np.testing.assert_array_equal(a, b)


@pytest.mark.parametrize("bad", [("generator", {"bit_generator": "os.system"}), ("nope", 1),
                                 ("text_array", "O", [1], ["x"]), ("array",), b"bytes"])
def test_a_hand_edited_env_state_is_refused_in_one_line(bad):
    config = OmegaConf.load(CONF / "env" / "cartpole.yaml")
    state = GymCopies(config, [1]).state_dict()
    state["envs"][0][-1]["attributes"]["state"] = bad  # CartPoleEnv.state
    with pytest.raises(ConfigError, match="its CartPole-v1 state does not fit"):
        GymCopies(config, [1]).load_state_dict(state)


@pytest.mark.parametrize("env_id, actions", [
    ("Acrobot-v1", 3), ("MountainCar-v0", 3), ("Taxi-v4", 6), ("FrozenLake-v1", 4),
    ("CliffWalking-v1", 4),
])
def test_gymnasium_environments_round_trip_with_weights_only(env_id, actions):
    config = OmegaConf.load(CONF / "env" / "gym.yaml")
    config.id = env_id
    rng = np.random.default_rng(1)
    first = GymCopies(config, [1, 2])
    for _ in range(30):
        first.step(rng.integers(0, actions, 2))
    buffer = io.BytesIO()
    torch.save(first.state_dict(), buffer)
    buffer.seek(0)
    second = GymCopies(config, [1, 2])
    assert second.load_state_dict(torch.load(buffer, weights_only=True)) is False
    for _ in range(200):
        chosen = rng.integers(0, actions, 2)
        for a, b in zip(first.step(chosen), second.step(chosen)):
            np.testing.assert_array_equal(a, b)


@pytest.mark.parametrize("bit_generator", ["PCG64", "MT19937", "Philox", "SFC64"])
def test_every_numpy_generator_is_stored_as_plain_data(bit_generator):
    env = gym.make("CartPole-v1")
    env.reset(seed=0)
    env.unwrapped._np_random = np.random.Generator(getattr(np.random, bit_generator)(5))
    buffer = io.BytesIO()
    torch.save(capture_state(env), buffer)
    buffer.seek(0)
    twin = gym.make("CartPole-v1")
    twin.reset(seed=1)
    restore_state(twin, torch.load(buffer, weights_only=True))
    assert env.unwrapped.np_random.random() == twin.unwrapped.np_random.random()


class HoldsAnObject(gym.Env):
    """An environment whose state is an object (a Python random generator), not data."""

    observation_space = gym.spaces.Box(-1.0, 1.0, (1,), np.float32)
    action_space = gym.spaces.Discrete(2)

    def reset(self, *, seed=None, options=None):
        super().reset(seed=seed)
        import random

        self.generator = random.Random(int(self.np_random.integers(1 << 30)))
        self.t = 0
        return np.zeros(1, np.float32), {}

    def step(self, action):
        self.t += 1
        value = np.array([self.generator.random()], np.float32)
        return value, float(value[0]), False, self.t >= 5, {}


def test_an_env_holding_objects_restarts_its_episodes_reproducibly(capsys):
    gym.register("tests/HoldsAnObject-v0", entry_point=HoldsAnObject)
    config = OmegaConf.create({"id": "tests/HoldsAnObject-v0", "kwargs": {}})
    env = gym.make("tests/HoldsAnObject-v0")
    env.reset(seed=0)
    with pytest.raises(UncapturableState, match=r"HoldsAnObject\.generator holds a random\.Random"):
        capture_state(env)
    copies = GymCopies(config, [7, 8])
    for _ in range(3):
        copies.step(np.zeros(2, int))
    state = copies.state_dict()
    assert "envs" not in state and "random.Random" in state["uncapturable"]
    resumed = [GymCopies(config, [7, 8]) for _ in range(2)]
    assert all(r.load_state_dict(state) for r in resumed)
    assert "resume of tests/HoldsAnObject-v0 is not exact" in capsys.readouterr().err
    steps = [r.step(np.zeros(2, int)) for r in resumed]
    np.testing.assert_array_equal(steps[0].reward, steps[1].reward)  # the same restart seeds


# ----------------------------------------------------------------------------- poisoned files
def test_poisoned_checkpoints_are_refused_unread(gym_run, tmp_path):
    marker = tmp_path / "marker"
    for what, path in poisoned_files(gym_run / "checkpoints" / "last.ckpt", marker,
                                     tmp_path / "files").items():
        with pytest.raises(UnsafeCheckpoint) as refused:
            read_checkpoint(path)
        assert str(path) in str(refused.value), what
        if what == "whole file pickled":
            assert "(io.open)" in str(refused.value)  # the global it would have called
        # Lightning's own loader reads with weights_only=True whatever it is asked.
        if what != "bytes in any field" and what != "bytes in the env copies":
            with pytest.raises(pickle.UnpicklingError):
                AtomicCheckpointIO(gamma=0.9).load_checkpoint(path, weights_only=False)
        assert not marker.exists(), what


@pytest.mark.parametrize("what, how", [
    ("bytes in the env copies", "ckpt_path"), ("whole file pickled", "ckpt_path"),
    ("bytes in the env copies", "in the run folder"), ("whole file pickled", "in the run folder"),
    ("whole file pickled, protocol 4", "in the run folder")])
def test_a_poisoned_checkpoint_stops_the_command_in_one_line(gym_run, tmp_path, what, how):
    marker = tmp_path / "marker"
    poisoned = poisoned_files(gym_run / "checkpoints" / "last.ckpt", marker, tmp_path / "files")[what]
    run_dir = tmp_path / "run"
    if how == "ckpt_path":
        result = train_command(run_dir, f"ckpt_path={poisoned}")
    else:  # a killed run's folder, its newest checkpoint swapped for the poisoned one
        shutil.copytree(gym_run, run_dir)
        (run_dir / "eval.json").unlink()
        shutil.copy(poisoned, run_dir / "checkpoints" / "last.ckpt")
        result = train_command(run_dir)
    line = one_line(result.stderr)
    assert result.returncode == 2, result.stderr
    assert line.startswith("Error in config: ") and ("refused" in line or "raw bytes" in line), line
    assert not marker.exists()
    assert not (run_dir / "eval.json").exists()


def stranger_files(folder: Path) -> dict[str, Path]:
    """Files that are no checkpoint of a run but load without running code: whole pickles of
    plain data, torch's legacy format, a torch archive of something else."""
    folder.mkdir(parents=True, exist_ok=True)
    data = {"state_dict": {}, "rs_lightning": {"agent": "dqn"}, "global_step": 99}
    files = {f"pickle, protocol {p}": folder / f"plain{p}.ckpt" for p in (0, 2, 5)}
    for protocol, path in zip((0, 2, 5), files.values()):
        path.write_bytes(pickle.dumps(data, protocol=protocol))
    files["torch's legacy format"] = folder / "legacy.ckpt"
    torch.save({"x": torch.ones(2)}, files["torch's legacy format"],
               _use_new_zipfile_serialization=False)
    files["a torch archive of something else"] = folder / "other.ckpt"
    torch.save({"x": torch.ones(2)}, files["a torch archive of something else"])
    return files


def test_a_file_put_in_a_run_folders_checkpoints_is_refused_damage_skipped(gym_run, tmp_path):
    """What a kill or a full disk can leave (a truncated file, torn bytes) is skipped for the
    checkpoint before it; what someone put there (a whole pickle, another program's file)
    refuses the folder, whatever the file holds."""
    good = gym_run / "checkpoints" / "last.ckpt"
    marker = tmp_path / "marker"
    put = {**stranger_files(tmp_path / "files"),
           **poisoned_files(good, marker, tmp_path / "poisoned")}
    run_dir = tmp_path / "run"
    shutil.copytree(gym_run, run_dir)
    last = run_dir / "checkpoints" / "last.ckpt"
    for what, path in put.items():
        shutil.copy(path, last)
        with pytest.raises(UnsafeCheckpoint) as refused:
            newest_checkpoint(run_dir)
        assert str(last) in str(refused.value), what
    damaged = {"truncated": good.read_bytes()[: good.stat().st_size // 2],
               "torn": good.read_bytes()[:100] + bytes(200) + good.read_bytes()[300:],
               "empty": b"", "random bytes": np.random.default_rng(0).bytes(4096)}
    for what, content in damaged.items():
        last.write_bytes(content)
        found = newest_checkpoint(run_dir)
        assert found is not None and found[0].name == "step0000040.ckpt", what
    assert not marker.exists()


def test_a_poisoned_checkpoint_in_a_sweep_job_fails_that_job_and_runs_nothing(gym_run, tmp_path):
    marker = tmp_path / "marker"
    poisoned = poisoned_files(gym_run / "checkpoints" / "last.ckpt", marker,
                              tmp_path / "files")["bytes in the env copies"]
    job = tmp_path / "sweep" / "job"  # a killed job of the sweep, its checkpoint swapped
    shutil.copytree(gym_run, job)
    (job / "eval.json").unlink()
    shutil.copy(poisoned, job / "checkpoints" / "last.ckpt")
    result = subprocess.run(
        [*python_command(), "train.py", "-m", *GYM_RUN, "seed=0", f"hydra.sweep.dir={job.parent}",
         "hydra.sweep.subdir=job"],
        cwd=ROOT, capture_output=True, text=True, timeout=300, check=False,
    )
    assert result.returncode == 1, result.stderr  # the sweep's status: a job failed
    failure = json.loads((job / "failed.json").read_text())
    assert failure["error"] == "UnsafeCheckpoint" and "raw bytes" in failure["message"]
    assert not marker.exists() and not (job / "eval.json").exists()


def test_a_restart_ends_the_n_step_windows_episodes_as_a_time_limit_would():
    from rs_lightning.engine.replay import NStepReturns

    window = NStepReturns(3, 0.5, copies=1, obs_shape=(1,))
    for t in range(2):  # two steps of an episode in progress
        window.push(np.array([[t]], np.float32), np.array([0]), np.array([1.0]),
                    np.array([[t + 1]], np.float32), np.array([False]), np.array([False]))
    window.truncate(np.array([[2.0]], np.float32))  # the state the checkpoint held
    # The restarted episode's first step pushes out the first start: r0 + 0.5 r1, from state
    # 2 (where the abandoned episode was), bootstrapped with 0.5^2, not from the new episode.
    obs, _, reward, reached, stopped, discount = window.push(
        np.array([[9]], np.float32), np.array([0]), np.array([1.0]),
        np.array([[10]], np.float32), np.array([False]), np.array([False]))
    assert obs[0, 0] == 0 and reward[0] == 1.5 and reached[0, 0] == 2.0
    assert not stopped[0] and discount[0] == 0.25
