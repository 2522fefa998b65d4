"""The exact references of the trading and American-put presets in docs/guides/environments.md.

    python docs/benchmark_worlds_table.py

builds each preset's environment (conf/env/trading.yaml, conf/env/american_put.yaml), reads
its tabular model and prints, with the exact-reference engine
(rs_lightning.references.tabular_references, the figures a run writes into eval.json): the
expectation-optimal policy and the CVaR_0.1-optimal one (alpha 0: the per-decision fixed
point, which on these time-folded worlds is a policy of the period too), the first decision
each takes and the exact E, VaR_0.1 and CVaR_0.1 of their discounted episode return, then the
static optima (over policies of the state, step and return so far) of E, CVaR_0.1 and VaR_0.1.
About 10 s of CPU a world.
"""

from __future__ import annotations

from pathlib import Path

import gymnasium as gym
import numpy as np
from omegaconf import OmegaConf

import rs_lightning.envs  # noqa: F401  (registers the rs_lightning/ environments)
from rs_lightning.references import tabular_references as tr
from rs_lightning.risk import Utility

CONF = Path(__file__).resolve().parents[1] / "conf" / "env"
RHO = 0.1
# What the first action of each world means.
FIRST_DECISION = {"trading": ("go short", "sell (flat)", "keep the long"),
                  "american_put": ("hold", "exercise")}
MEASURES = {"E": Utility(1.0), "VaR_0.1": Utility(0.0, "var", {"rho": RHO}),
            "CVaR_0.1": Utility(0.0, "cvar", {"rho": RHO})}


def world(name: str):
    section = OmegaConf.to_container(OmegaConf.load(CONF / f"{name}.yaml"), resolve=True)
    env = gym.make(section["id"], **section["kwargs"])
    return tr.tabular_model(env, horizon=section["max_episode_steps"]), float(section["gamma"])


def main() -> None:
    print("| world | policy | first decision | E | VaR_0.1 | CVaR_0.1 |")
    print("|---|---|---|---|---|---|")
    optima = []
    for name in FIRST_DECISION:
        model, gamma = world(name)
        grid = tr.model_grid(model, gamma)
        start = int(np.argmax(model.start))
        fixed_point = tr.per_decision_fixed_point(model, MEASURES["CVaR_0.1"], gamma, grid=grid)
        for label, policy in (("E-optimal", tr.expectation_optimal_policy(model, gamma)),
                              ("CVaR_0.1-optimal", np.array(fixed_point.policy))):
            figures = [tr.static_utility(model, policy, utility, gamma, grid)
                       for utility in MEASURES.values()]
            print(f"| `{name}` | {label} | {FIRST_DECISION[name][int(policy[start])]} | "
                  + " | ".join(f"{x:.3f}" for x in figures) + " |")
        best = {key: tr.static_optimum(model, utility, gamma)
                for key, utility in MEASURES.items()}
        optima.append(f"| `{name}` | " + " | ".join(f"{best[key].utility:.3f}" for key in MEASURES)
                      + " |")
    print()
    print("| world | static optimum of E | of VaR_0.1 | of CVaR_0.1 |")
    print("|---|---|---|---|")
    print("\n".join(optima))


if __name__ == "__main__":
    main()
