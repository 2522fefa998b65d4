"""docs/navigation_routes.py: the greedy paths of a run's seeds on the risky navigation
world, played in the world itself, each named by its route; a bad panel named in one line."""

from __future__ import annotations

import importlib.util
from pathlib import Path

import numpy as np
import pytest

ROOT = Path(__file__).resolve().parents[1]
_spec = importlib.util.spec_from_file_location("navigation_routes",
                                               ROOT / "docs" / "navigation_routes.py")
navigation_routes = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(navigation_routes)


class Scripted:
    """An agent that always takes one action, in the preset's world."""

    def __init__(self, compose, action) -> None:
        from rs_lightning.config.schema import validate

        self.config = validate(compose(["experiment=risky_navigation"]))
        self.action = np.asarray(action, dtype=np.float32)

    def act(self, observations):
        return np.broadcast_to(self.action, (len(observations), 2))


def test_a_path_is_the_worlds_own_positions_to_the_goal_or_the_limit(compose):
    from rs_lightning.envs.risky_navigation import in_region

    east, reached = navigation_routes.greedy_path(Scripted(compose, [1.0, 0.0]))
    # 19 full steps east reach the goal through both gates, 13 of them in the region.
    assert reached and len(east) == 20 and np.allclose(east[-1], [1.9, 0.0])
    assert sum(in_region(x, y) for x, y in east) == 13
    north, reached = navigation_routes.greedy_path(Scripted(compose, [0.0, 1.0]))
    assert not reached and len(north) == navigation_routes.MAX_STEPS + 1
    assert np.allclose(north[-1], [0.0, 2.5])  # stopped by the arena's edge


def test_the_figure_has_a_line_per_seed_and_a_bad_panel_is_named(compose, tmp_path, capsys,
                                                                   monkeypatch):
    import rs_lightning

    run = tmp_path / "run"
    for seed in (0, 1):
        (run / f"seed_{seed}").mkdir(parents=True)
    actions = {"seed_0": [1.0, 0.0], "seed_1": [1.0, 1.0]}
    monkeypatch.setattr(rs_lightning, "load_agent",
                        lambda folder: Scripted(compose, actions[Path(folder).name]))
    out = tmp_path / "routes.png"
    assert navigation_routes.main([f"Scripted={run}", "--out", str(out)]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert lines[:2] == ["Scripted seed 0: crosses, 19 steps",
                         "Scripted seed 1: stalls, 100 steps"]
    assert out.read_bytes()[:4] == b"\x89PNG" and out.stat().st_size > 5_000
    with pytest.raises(SystemExit):
        navigation_routes.main([str(run), "--out", str(out)])
    assert "a panel is TITLE=RUN" in capsys.readouterr().err
