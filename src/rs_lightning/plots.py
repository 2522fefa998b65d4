"""Figures of a trained run: the learned return distributions behind a decision.

    python -m rs_lightning.plots outputs/runs/<run> [--cell 1,0] [--out figure.png]

draws, for one state, the learned CDF and density of Z(s, a) for every action, with markers
for Q (expectation), R (the run's risk measure) and U (the utility) of each action and the
chosen action highlighted (the paper's Figure 5). On the grid worlds it overlays the exact
law of the discounted return of each first action followed by the learned greedy policy, and
prints the Wasserstein-1 distance between learned and exact. Plots only read a run's
``config.yaml`` and ``checkpoints/last.ckpt``.
"""

from __future__ import annotations

import argparse
import sys
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch
from omegaconf import OmegaConf

from rs_lightning.evaluation import grid_policy_table
from rs_lightning.module import RiskSensitiveQLearning
from rs_lightning.risk import ReturnDistribution, expectation
from rs_lightning.schema import ValidatedConfig, validate

ACTION_NAMES = ("right", "down", "left", "up")
DENSITY_BIN = 0.1
COLORS = ("tab:blue", "tab:orange", "tab:green", "tab:red", "tab:purple", "tab:brown")


@dataclass
class TrainedRun:
    settings: ValidatedConfig
    module: RiskSensitiveQLearning
    run_dir: Path


def load_run(run_dir: Path, checkpoint: str = "checkpoints/last.ckpt") -> TrainedRun:
    """Rebuild a run's module from its resolved config and load its checkpoint."""
    from rs_lightning.train import build

    run_dir = Path(run_dir)
    settings = validate(OmegaConf.load(run_dir / "config.yaml"))
    _, module = build(settings)
    state = torch.load(run_dir / checkpoint, map_location="cpu", weights_only=True)
    module.load_state_dict(state["state_dict"])
    module.eval()
    return TrainedRun(settings, module, run_dir)


def cdf_on(dist: ReturnDistribution, z: np.ndarray) -> np.ndarray:
    """P(Z <= z) of a 1-D distribution at the points ``z``."""
    values = dist.values.double().numpy()
    cumulative = dist.probs.double().cumsum(-1).numpy()
    index = np.searchsorted(values, z, side="right") - 1
    return np.where(index >= 0, cumulative[np.clip(index, 0, None)], 0.0)


def wasserstein_1(cdf_a: np.ndarray, cdf_b: np.ndarray, z: np.ndarray) -> float:
    """integral |F_a - F_b| dz on the grid ``z`` (both CDFs given on it)."""
    return float(np.trapezoid(np.abs(cdf_a - cdf_b), z))


def exact_laws(run: TrainedRun, cell: tuple[int, int]):
    """The exact law of Z(cell, a) for every action under the learned greedy policy, or None."""
    train = run.settings.train
    if not train.env.grid_size:
        return None
    from rs_lightning.envs.exact import exact_return

    table = grid_policy_table(run.module.greedy, train.env.grid_size)
    policy = {tuple(map(int, key.split(","))): action for key, action in table.items()}
    kwargs = dict(train.env.kwargs or {})
    laws = []
    for action in range(run.module.n_actions):
        laws.append(
            exact_return(
                train.env.id, policy, max_steps=kwargs.get("max_steps"),
                trap_terminal=kwargs.get("trap_terminal"), gamma=train.env.gamma,
                start=cell, first_action=action,
            ).mixture
        )
    return laws


def plot_return_distributions(run: TrainedRun, cell: tuple[int, int], out: Path) -> dict:
    """Draw the figure into ``out``; returns per-action Q, R, U and the W1 distances."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    train, utility = run.settings.train, run.settings.utility
    obs = torch.tensor([cell], dtype=torch.float32)
    with torch.no_grad():
        dist = run.module.agent.return_distribution(obs).select(0)  # [A, K]
    q = expectation(dist).numpy()
    risk = utility.risk_value(dist).numpy()
    u = utility(dist).numpy()
    chosen = int(np.argmax(u))
    z = np.linspace(train.env.return_min - 0.5, train.env.return_max + 0.5, 801)
    laws = exact_laws(run, cell)

    fig, (ax_cdf, ax_pdf) = plt.subplots(1, 2, figsize=(12, 4.5))
    report = {"cell": list(cell), "chosen_action": chosen, "actions": []}
    for a in range(run.module.n_actions):
        color = COLORS[a % len(COLORS)]
        name = ACTION_NAMES[a] if a < len(ACTION_NAMES) else str(a)
        width = 2.6 if a == chosen else 1.2
        label = f"{name}{' (chosen)' if a == chosen else ''}: Q={q[a]:.2f} R={risk[a]:.2f} U={u[a]:.2f}"
        learned = cdf_on(dist.select(a), z)
        ax_cdf.plot(z, learned, color=color, lw=width, label=label)
        # Density of the learned law: its mass per bin over the bin width. Bins of 0.1 hold a
        # whole number of the paper's grid steps (0.02), so the curve does not alias.
        bins = np.arange(z[0], z[-1] + DENSITY_BIN, DENSITY_BIN)
        mass, _ = np.histogram(dist.values[a].numpy(), bins=bins, weights=dist.probs[a].numpy())
        ax_pdf.plot(0.5 * (bins[1:] + bins[:-1]), mass / DENSITY_BIN, color=color, lw=width)
        entry = {"action": a, "q": float(q[a]), "risk": float(risk[a]), "utility": float(u[a])}
        if laws is not None:
            exact_cdf = laws[a].cdf(z)
            ax_cdf.plot(z, exact_cdf, color=color, lw=1.0, ls=":")
            ax_pdf.plot(z, laws[a].pdf(z), color=color, lw=1.0, ls=":")
            entry["wasserstein_1"] = wasserstein_1(learned, exact_cdf, z)
        for ax in (ax_cdf, ax_pdf):
            ax.axvline(q[a], color=color, ls="-", lw=0.8, alpha=0.6)
            ax.axvline(risk[a], color=color, ls="--", lw=0.8, alpha=0.6)
        ax_cdf.plot([u[a]], [utility.params.get("rho", 0.5)], marker="*", ms=12 if a == chosen else 8,
                    color=color)
        report["actions"].append(entry)

    risk_name = utility.risk + (f"_{utility.params['rho']:g}" if "rho" in utility.params else "")
    title = (
        f"{run.settings.agent.name} on {train.env.id.split('/')[-1]}, state {cell}: "
        f"U = {utility.alpha:g} E + {1 - utility.alpha:g} {risk_name}"
    )
    fig.suptitle(title)
    ax_cdf.set(xlabel="return z", ylabel="F(z | s, a)", title="CDF (dotted: exact law)")
    ax_pdf.set(xlabel="return z", ylabel="density", title="density; solid: Q, dashed: R, star: U")
    ax_cdf.legend(fontsize=8, loc="upper left")
    ax_cdf.grid(alpha=0.3)
    ax_pdf.grid(alpha=0.3)
    fig.tight_layout()
    out = Path(out)
    out.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(out, dpi=110)
    plt.close(fig)
    return report


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("run_dir", type=Path)
    parser.add_argument("--cell", default="1,0", help="the state as x,y (default: the start 1,0)")
    parser.add_argument("--out", type=Path, help="image file (default: <run>/distributions_<x>_<y>.png)")
    args = parser.parse_args(argv)
    for needed in ("config.yaml", "checkpoints/last.ckpt"):
        if not (args.run_dir / needed).is_file():
            print(f"error: {args.run_dir / needed} not found: is this a run folder?", file=sys.stderr)
            return 2
    cell = tuple(int(v) for v in args.cell.split(","))
    out = args.out or args.run_dir / f"distributions_{cell[0]}_{cell[1]}.png"
    report = plot_return_distributions(load_run(args.run_dir), cell, out)
    for entry in report["actions"]:
        w1 = f"  W1 to exact {entry['wasserstein_1']:.3f}" if "wasserstein_1" in entry else ""
        mark = " <- chosen" if entry["action"] == report["chosen_action"] else ""
        print(f"action {entry['action']}: Q={entry['q']:.3f} R={entry['risk']:.3f} "
              f"U={entry['utility']:.3f}{w1}{mark}")
    print(f"figure: {out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
