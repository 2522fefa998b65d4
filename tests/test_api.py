"""The Python API of trained agents and runs (rs_lightning.load_agent, load_runs), on a run
of every agent."""

from __future__ import annotations

import numpy as np
import pytest

import rs_lightning
from tests.conftest import agents_by_actions

# Every cell of the 3 x 3 grid worlds: the observations of the default environment.
CELLS = np.array([[x, y] for x in range(3) for y in range(3)], dtype=np.float32)
# The actor-critics train on the risky navigation world: its observations are positions.
POSITIONS = np.array([[x, y] for x in (0.0, 0.5, 1.5) for y in (-1.0, 0.0, 1.0)],
                     dtype=np.float32)
DISCRETE = agents_by_actions(continuous=False)
CONTINUOUS = agents_by_actions(continuous=True)


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    """A short run of every agent (risky rewards, or the risky navigation world for the
    actor-critics; CVaR_0.1 at alpha 0.5)."""
    from hydra import compose, initialize_config_dir

    from rs_lightning.app.train import run
    from tests.conftest import CONF

    folders = {}
    for agent in [*DISCRETE, *CONTINUOUS]:  # the replay agents (PPO: tests/test_ppo.py)
        folder = tmp_path_factory.mktemp(agent)
        with initialize_config_dir(config_dir=str(CONF), version_base="1.3"):
            world = ["env=risky_navigation"] if agent in CONTINUOUS else []
            cfg = compose("train", [*world, f"agent={agent}", "debug=quick", "logger=none",
                                    "callbacks.progress_bar=false", "trainer.max_steps=40",
                                    "evaluation.every_n_steps=0", "evaluation.episodes=20",
                                    "risk=cvar", "alpha=0.5"])
        run(cfg, run_dir=folder)
        folders[agent] = folder
    return folders


@pytest.mark.parametrize("agent", DISCRETE)
def test_a_trained_agent_acts_and_shows_its_return_laws(runs, agent):
    trained = rs_lightning.load_agent(runs[agent])
    assert trained.config.agent.name == agent and trained.steps == 40
    actions = trained.act(CELLS)
    assert actions.shape == (9,) and actions.dtype == np.int64
    assert ((0 <= actions) & (actions < trained.n_actions)).all()
    laws = trained.distribution(CELLS)
    shape = (9, trained.n_actions)
    assert laws.expectation.shape == laws.var(0.1).shape == laws.cvar(0.1).shape == shape
    # The quantiles rise with the level, the CDF with the point, from 0 to 1.
    quantiles = laws.quantiles([0.05, 0.5, 0.95])
    assert quantiles.shape == (*shape, 3) and (np.diff(quantiles, axis=-1) >= 0).all()
    cdf = laws.cdf([-100.0, 0.0, 100.0])
    assert (np.diff(cdf, axis=-1) >= -1e-6).all()
    assert np.allclose(cdf[..., 0], 0.0) and np.allclose(cdf[..., -1], 1.0, atol=1e-5)
    # CVaR below the mean; U between them at alpha 0.5, and the agent acts on U (IQN draws
    # its fractions anew at each call, so its U is another sample than its action's).
    assert (laws.cvar(0.1) <= laws.expectation + 1e-5).all()
    assert np.allclose(laws.utility, 0.5 * laws.expectation + 0.5 * laws.cvar(0.1), atol=1e-5)
    if agent != "iqn":
        chosen = np.take_along_axis(laws.utility, actions[:, None], axis=1)[:, 0]
        assert np.allclose(chosen, laws.utility.max(axis=1), atol=1e-6)


@pytest.mark.parametrize("agent", ["c51", "dqn"])
def test_another_setting_and_an_evaluation(runs, agent):
    trained = rs_lightning.load_agent(runs[agent])
    if agent == "dqn":  # a point Q: no setting changes its greedy action, so none is taken
        with pytest.raises(ValueError, match="agent=dqn learns no distribution"):
            trained.at(alpha=1.0)
        assert trained.at(alpha=0.5).utility == trained.utility  # its own setting
    else:
        neutral = trained.at(alpha=1.0)
        assert neutral.utility.alpha == 1.0 and trained.utility.alpha == 0.5
        laws = neutral.distribution(CELLS)
        chosen = np.take_along_axis(laws.expectation, neutral.act(CELLS)[:, None], axis=1)
        assert np.allclose(chosen[:, 0], laws.expectation.max(axis=1), atol=1e-6)
        assert trained.at(rho=0.2).utility.params == {"rho": 0.2}
        with pytest.raises(ValueError, match="eta: not the parameter of risk=cvar; allowed: rho"):
            trained.at(eta=0.5)
    summary = trained.evaluate(episodes=50)
    assert summary["episodes"] == 50
    assert summary["cvar"] <= summary["expectation"] + 1e-9
    assert summary == trained.evaluate(episodes=50)  # the run's seed: the same episodes


@pytest.mark.parametrize("agent", CONTINUOUS)
def test_an_actor_critic_acts_in_its_box_and_shows_the_law_of_its_action(runs, agent):
    trained = rs_lightning.load_agent(runs[agent])
    assert trained.continuous and trained.n_actions == 1
    actions = trained.act(POSITIONS)
    assert actions.shape == (9, 2) and actions.dtype == np.float32
    assert (np.abs(actions) < 1).all()
    np.testing.assert_allclose(trained.env_action(actions), actions, atol=1e-6)  # a [-1, 1] box
    laws = trained.distribution(POSITIONS)  # Z(s, pi(s)): one action, the agent's
    assert laws.expectation.shape == laws.cvar(0.1).shape == (9, 1)
    assert (laws.cvar(0.1) <= laws.expectation + 1e-5).all()
    assert np.allclose(laws.utility, 0.5 * laws.expectation + 0.5 * laws.cvar(0.1), atol=1e-5)
    # Not risk-conditioned: its actor acts alike at every setting, so no other one is taken.
    with pytest.raises(ValueError, match=f"agent={agent} is an actor-critic trained at one "
                                         "setting"):
        trained.at(alpha=1.0)
    with pytest.raises(ValueError, match="actor-critic"):
        trained.at(rho=0.3)
    assert trained.at(alpha=0.5).utility == trained.utility
    summary = trained.evaluate(episodes=20)
    assert summary["episodes"] == 20 and summary["cvar"] <= summary["expectation"] + 1e-9


def test_an_actor_critic_gives_actions_in_the_environments_own_box(tmp_path):
    """Pendulum's torque lies in [-2, 2]: the agent's -1, 0, 1 are -2, 0, 2 there."""
    from hydra import compose, initialize_config_dir

    from rs_lightning.app.train import run
    from tests.conftest import CONF

    with initialize_config_dir(config_dir=str(CONF), version_base="1.3"):
        cfg = compose("train", ["env=pendulum", "agent=dsac", "agent.hidden_sizes=[16]",
                                "debug=quick", "logger=none", "callbacks.progress_bar=false",
                                "trainer.max_steps=10", "evaluation.every_n_steps=0",
                                "evaluation.episodes=2"])
    run(cfg, run_dir=tmp_path)
    trained = rs_lightning.load_agent(tmp_path)
    torques = trained.env_action(np.array([[-1.0], [0.0], [1.0]]))
    np.testing.assert_allclose(torques, [[-2.0], [0.0], [2.0]])
    assert trained.act(np.zeros((4, 3), np.float32)).shape == (4, 1)


def test_a_run_recorded_before_a_key_of_its_agent_existed_loads_with_its_default(runs, tmp_path):
    """A run written before ``agent.actor_law`` existed (DSAC's config without it) loads,
    the key taking the law such runs used (the format migration's step); a recorded value is
    kept."""
    import shutil

    import yaml

    def copy_with(folder, **agent_keys):
        shutil.copytree(runs["dsac"], folder)
        config = yaml.safe_load((folder / "config.yaml").read_text())
        assert config["agent"].pop("actor_law") == "pessimistic"
        del config["format_version"]  # as such a run wrote it: no recorded format
        config["agent"].update(agent_keys)
        (folder / "config.yaml").write_text(yaml.safe_dump(config))
        return rs_lightning.load_agent(folder)

    old = copy_with(tmp_path / "old")
    assert old.config.agent.actor_law == "pessimistic"
    np.testing.assert_allclose(old.act(POSITIONS), rs_lightning.load_agent(
        runs["dsac"]).act(POSITIONS))
    assert copy_with(tmp_path / "recorded", actor_law="mixture").config.agent.actor_law == "mixture"


def test_bad_calls_say_what_to_do(runs, tmp_path):
    trained = rs_lightning.load_agent(runs["dqn"])
    with pytest.raises(ValueError, match=r"expected a batch \[B, 2\].*\(wrap one observation "
                                         r"as \[obs\]\)"):
        trained.act([1.0, 0.0])
    for seed in (0, 1):
        (tmp_path / f"seed_{seed}").mkdir()
        (tmp_path / f"seed_{seed}" / "config.yaml").write_text(f"seed: {seed}\n")
    with pytest.raises(ValueError, match=r"a run of several seeds \(0, 1\): give one, "
                                         r"load_agent\(run, seed=s\)"):
        rs_lightning.load_agent(tmp_path)
    with pytest.raises(ValueError, match="has no seed 2; its seeds: 0, 1"):
        rs_lightning.load_agent(tmp_path, seed=2)


def test_every_call_refuses_what_it_cannot_answer_in_one_line(runs):
    """Settings outside their domains, observations that are not the environment's (not
    finite, another shape, complex, outside its space), actions outside [-1, 1], evaluations
    of no episode: a ValueError of one line naming the argument, never a result."""
    import torch

    grid = rs_lightning.load_agent(runs["qr_dqn"])
    for alpha in (1.2, -0.01, float("nan"), "half", True):
        with pytest.raises(ValueError, match=r"^alpha: must be in \[0, 1\]"):
            grid.at(alpha=alpha)
    with pytest.raises(ValueError, match="rho"):
        grid.at(rho=0.0)
    refused = {
        r"every value must be finite, got inf at \[0, 0\]": [[np.inf, 0.0]],
        r"every value must be finite, got nan at \[1, 1\]": [[0.0, 0.0], [1.0, np.nan]],
        r"expected a batch \[B, 2\] .*got shape \[2, 1, 2\]": np.zeros((2, 1, 2)),
        r"expected a batch \[B, 2\] .*got shape \[1, 4\]": [[0, 0, 0, 0]],
        "expected real numbers, got complex64": torch.zeros(2, 2, dtype=torch.complex64),
        "expected real numbers": [["a", "b"]],
        "not a rectangular batch": [[0, 0], [1]],
        # The grid's cells lie in [0, 2]: cell (3, 1) is no state of it.
        r"row 1 lies outside .*observation space: 3 at \[0\], where the bounds are \[0, 2\]":
            [[0, 0], [3, 1]],
    }
    for message, observations in refused.items():
        for call in (grid.act, grid.distribution):
            with pytest.raises(ValueError, match=f"^observations: {message}"):
                call(observations)
    for episodes in (0, -3, 2.5, True, 10**8):
        with pytest.raises(ValueError, match=r"^episodes: must be a whole number of episodes"):
            grid.evaluate(episodes=episodes)
    with pytest.raises(ValueError, match=r"^seed: must be a whole number in \[0, 2\^32\)"):
        grid.evaluate(episodes=2, seed=-1)
    with pytest.raises(ValueError, match=r"^rho: the VaR / CVaR level must be in \(0, 1\]"):
        grid.evaluate(episodes=2, rho=0.0)
    with pytest.raises(ValueError, match="acts among 4 discrete actions"):
        grid.env_action([[0.5]])

    actor = rs_lightning.load_agent(runs["tqc"])  # the risky navigation world, 2-d actions
    for actions, message in (([[1.5, 0.0]], r"row 0 lies outside the agent's box \[-1, 1\]\^2"),
                             ([[0.0, np.nan]], "every value must be finite"),
                             ([[0.5]], r"expected a batch \[B, 2\] of actions")):
        with pytest.raises(ValueError, match=f"^actions: {message}"):
            actor.env_action(actions)
    with pytest.raises(ValueError, match="^observations: row 0 lies outside"):
        actor.act([[9.0, 0.0]])
    # A network whose weights hold NaN gives no action rather than a NaN one.
    broken = rs_lightning.load_agent(runs["tqc"])
    with torch.no_grad():
        for parameter in broken.policy.agent.parameters():
            parameter.fill_(float("nan"))
    with pytest.raises(ValueError, match="non-finite actions for finite observations"):
        broken.act(POSITIONS)


def test_a_run_of_several_seeds_is_loaded_by_its_seed(runs, tmp_path):
    """The folder of a parallel_seeds run is refused without a seed (naming them), and
    ``seed=s`` loads that seed's folder."""
    import shutil

    for seed in (3, 4):  # two seeds' folders, as a parallel_seeds=2 run keeps them
        shutil.copytree(runs["c51"], tmp_path / f"seed_{seed}")
    (tmp_path / "config.yaml").write_text((runs["c51"] / "config.yaml").read_text())
    with pytest.raises(ValueError, match=r"is a run of several seeds \(3, 4\)"):
        rs_lightning.load_agent(tmp_path)
    assert rs_lightning.load_agent(tmp_path, seed=4).run_dir == tmp_path / "seed_4"
    with pytest.raises(ValueError, match="^seed: .* is a run of one seed"):
        rs_lightning.load_agent(runs["c51"], seed=0)


def test_a_sweeps_runs_as_rows(runs, tmp_path):
    import shutil

    for agent in ("c51", "dqn"):
        shutil.copytree(runs[agent], tmp_path / f"0_agent={agent}")
    rows = rs_lightning.load_runs(tmp_path, as_frame=False)
    assert sorted(row["settings.agent.name"] for row in rows) == ["c51", "dqn"]
    assert all(isinstance(row["expectation"], float) and row["job"].startswith("0_agent=")
               for row in rows)
    try:
        import pandas  # noqa: F401
    except ImportError:
        assert isinstance(rs_lightning.load_runs(tmp_path), list)
        with pytest.raises(ImportError, match="needs pandas"):
            rs_lightning.load_runs(tmp_path, as_frame=True)
    else:
        assert len(rs_lightning.load_runs(tmp_path)) == 2


def test_actions_have_the_environments_names(runs):
    """A grid world names its moves: the API gives the names of the actions it chose; an
    actor-critic's box has none, and a number that is no action is refused in one line."""
    grid = rs_lightning.load_agent(runs["c51"])
    assert grid.action_names == ("right", "down", "left", "up")
    actions = grid.act(CELLS)
    assert grid.name_actions(actions) == [grid.action_names[a] for a in actions]
    assert grid.name_actions([3, 0]) == ["up", "right"]
    for bad in ([4], [-1], [1.5], [[0, 1]]):
        with pytest.raises(ValueError, match=r"^actions: expected a batch \[B\] of whole "
                                             r"numbers in 0\.\.3"):
            grid.name_actions(bad)
    actor = rs_lightning.load_agent(runs["tqc"])
    assert actor.action_names is None
    with pytest.raises(ValueError, match="^name_actions: agent=tqc acts in a continuous box"):
        actor.name_actions([[0.0, 0.0]])
