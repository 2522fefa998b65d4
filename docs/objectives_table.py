"""The table of the two objectives in docs/guides/objectives.md (what does the agent optimise?).

    python docs/objectives_table.py <sweep folder> [<sweep folder> ...]

reads every ``seed_*/eval.json`` of the sweeps (agents x objective=per_decision,static x
grid worlds, ``parallel_seeds=5``) and prints one Markdown row per (agent, world, measure,
objective):
the share of orange episodes of each seed, E, VaR and CVaR of the undiscounted return S
(exact for a per-decision policy, which is cell-Markov; Monte Carlo for a static one, whose
policy also reads the return so far), the static utility U of the discounted return (exact /
Monte Carlo) and its gap to the exact static optimum, as means over seeds.
"""

from __future__ import annotations

import json
import sys
from collections import defaultdict
from pathlib import Path
from statistics import mean

from rs_lightning.analysis.results import risk_label

WORLDS = {"RiskyRewards-v0": "risky rewards", "RiskyTransitions-v0": "risky transitions",
          "RiskyGridWorld-v0": "risky grid world", "TwoStage-v0": "two-stage"}


def rows(sweeps: list[Path]) -> dict[tuple, list[dict]]:
    runs: dict[tuple, list[dict]] = defaultdict(list)
    for sweep in sweeps:
        for path in sorted(sweep.glob("*/seed_*/eval.json")):
            summary = json.loads(path.read_text())
            world = WORLDS.get(summary["env"].split("/")[-1], summary["env"])
            # the results tables' label: var_0.1, cvar_0.1; other measures by name (eval.json
            # has no parameters but rho)
            runs[(summary["agent"], world, risk_label(summary),
                  summary.get("objective", "per_decision"))].append(summary)
    return runs


def cell(runs: list[dict], exact: str, mc: str) -> str:
    if all(exact in r for r in runs):
        return f"{mean(r[exact] for r in runs):.3f}"
    return f"{mean(r[mc] for r in runs):.3f} (MC)"


def main(argv: list[str]) -> None:
    if not argv:
        raise SystemExit(__doc__)
    runs = rows([Path(a) for a in argv])
    print("| agent | world | measure | objective | orange share per seed (%) | E[S] | VaR_0.1[S] | "
          "CVaR_0.1[S] | static U | static optimum (path) | gap |")
    print("|---|---|---|---|---|---|---|---|---|---|---|")
    order = list(WORLDS.values())
    for (agent, world, risk, objective), group in sorted(
            runs.items(), key=lambda kv: (kv[0][0], order.index(kv[0][1]) if kv[0][1] in order
                                          else 99, kv[0][2], kv[0][3])):
        group.sort(key=lambda r: r["seed"])
        shares = " ".join(f"{100 * r['risk_outcome_orange']:.0f}" for r in group)
        static_u = cell(group, "exact_static_utility", "mc_static_utility")
        gap = cell(group, "static_gap", "mc_static_gap")
        optimum = group[0].get("static_optimum")
        best = "" if optimum is None else f"{optimum:.3f} ({group[0]['static_optimum_path']})"
        print(f"| {agent} | {world} | {risk} | {objective} | {shares} | "
              f"{cell(group, 'exact_expectation', 'expectation')} | {cell(group, 'exact_var', 'var')} | "
              f"{cell(group, 'exact_cvar', 'cvar')} | {static_u} | {best} | {gap} |")


if __name__ == "__main__":
    main(sys.argv[1:])
