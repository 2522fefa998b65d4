"""What QR-DQN's quantile Huber loss converges to on risky rewards, for several kappa.

QR-DQN fits N = 200 values theta_i(s, a) by the quantile Huber loss against the target
samples r + gamma theta_j(s', a*). With kappa small the fixed point of that loss is the
tau_i-quantile; with kappa large against the spread of the targets it is a Huber quantile,
pulled towards the mean, and the next backup treats those values as samples of the return,
so the pull compounds along the path. This script computes the fixed points along the two
shortest paths of RiskyRewards-v0 (two moves paying N(-0.1), then the green goal N(0.3) or
the orange goal N(+1) w.p. 0.75 / N(-1) w.p. 0.25; gamma 0.9), and prints E, VaR_0.1 and
U = 0.5 E + 0.5 VaR_0.1 read from the learnt values, as the agent reads them (docs/research/qr-dqn-kappa.md
quotes its output):

    python docs/qr_dqn_kappa.py        # about ten seconds
"""

from __future__ import annotations

from pathlib import Path

import torch
from omegaconf import OmegaConf
from torch import Tensor

from rs_lightning.agents.quantile_loss import midpoint_fractions, quantile_huber_loss
from rs_lightning.envs.grid_worlds import REWARD_STD, RiskyRewards
from rs_lightning.risk import Utility, expectation, from_quantiles, value_at_risk

# The environment and its learning discount, as training uses them.
GAMMA = OmegaConf.load(Path(__file__).parents[1] / "conf" / "env" / "risky_rewards.yaml").gamma
STEP_REWARD = RiskyRewards.step_reward
GOALS = {  # path name -> the goal's reward components ((probability, mean), ...)
    "green" if outcome > 0 else "orange": components
    for components, outcome in RiskyRewards.goals.values()
}
N_QUANTILES = 200
N_SAMPLES = 200_000  # Monte Carlo samples of each target distribution


def huber_quantiles(samples: Tensor, fractions: Tensor, kappa: float) -> Tensor:
    """The minimisers theta_i of mean_j |tau_i - 1{x_j < theta}| H_kappa(x_j - theta): the
    roots of each loss's slope (increasing in theta, read from the gradient of the agent's
    own :func:`quantile_huber_loss`), found by bisection -> ``[N]``."""
    targets = samples.sort().values.unsqueeze(0)  # [1, M]
    low = torch.full_like(fractions, targets[0, 0].item())
    high = torch.full_like(fractions, targets[0, -1].item())
    for _ in range(50):
        theta = (0.5 * (low + high)).requires_grad_()
        loss = quantile_huber_loss(theta.unsqueeze(0), fractions, targets, kappa, True)
        (slope,) = torch.autograd.grad(loss.sum(), theta)
        above = slope > 0
        high = torch.where(above, theta.detach(), high)
        low = torch.where(above, low, theta.detach())
    return 0.5 * (low + high)


def goal_rewards(components, generator: torch.Generator) -> Tensor:
    probabilities = torch.tensor([p for p, _ in components], dtype=torch.float64)
    means = torch.tensor([m for _, m in components], dtype=torch.float64)
    which = torch.multinomial(probabilities, N_SAMPLES, replacement=True, generator=generator)
    noise = torch.randn(N_SAMPLES, dtype=torch.float64, generator=generator)
    return means[which] + REWARD_STD * noise


def learnt_values(components, kappa: float, moves_before_goal: int, seed: int = 0) -> Tensor:
    """The fixed point of the learnt values ``moves_before_goal`` moves before the goal."""
    generator = torch.Generator().manual_seed(seed)
    fractions = midpoint_fractions(N_QUANTILES).double()
    theta = huber_quantiles(goal_rewards(components, generator), fractions, kappa)
    for _ in range(moves_before_goal):
        pick = torch.randint(N_QUANTILES, (N_SAMPLES,), generator=generator)
        noise = torch.randn(N_SAMPLES, dtype=torch.float64, generator=generator)
        targets = STEP_REWARD + REWARD_STD * noise + GAMMA * theta[pick]
        theta = huber_quantiles(targets, fractions, kappa)
    return theta


def main() -> None:
    utility = Utility(alpha=0.5, risk="var", params={"rho": 0.1})
    print("| kappa | state | path | E | VaR_0.1 | U (alpha 0.5) |")
    print("|---|---|---|---|---|---|")
    for kappa in (1.0, 0.1):
        for moves, state in ((0, "next to the goals (1, 2)"), (2, "start (1, 0)")):
            for path, components in GOALS.items():
                theta = learnt_values(components, kappa, moves).float().unsqueeze(0)
                distribution = from_quantiles(theta)
                mean = expectation(distribution).item()
                var = value_at_risk(distribution, 0.1).item()
                u = utility(distribution).item()
                print(f"| {kappa:g} | {state} | {path} | {mean:.3f} | {var:.3f} | {u:.3f} |")


if __name__ == "__main__":
    main()
