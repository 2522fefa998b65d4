"""What stacking an actor-critic's critics into one batched network would save: the C
critics of ``Critics`` (one MLP after the other, as the agents run them) against the same
weights stacked ``[C, out, in]`` and run as one network through the stacked linear layers
that K members use (``rs_lightning.agents.base.linear``), forward and backward on a
Pendulum-sized batch (3 observations + 1 action, batch 256), in one process.

    python benchmarks/stacked_critics.py               # 2 and 5 critics, 128 and 256 wide
    python benchmarks/stacked_critics.py --rounds 9 --clock wall

An update runs the critics three times (the online critics on the batch, the target critics
on the next states, the critics under the actor's action), so the ratio here bounds what
stacking would save on that part of an update. One torch thread; cases interleaved, round
after round; the ratio is the median of the rounds' ratios.
"""

from __future__ import annotations

import statistics

from rounds import calls, clock_named, interleaved, median_ratio, rounds_parser

BATCH = 256


def cases(n_critics: int, width: int):
    from types import SimpleNamespace

    import torch

    from rs_lightning.agents.actor_critic import Critics
    from rs_lightning.agents.base import linear

    torch.manual_seed(0)
    # What Critics reads of the problem and of the agent's settings (DSAC's 32 quantiles).
    critics = Critics(SimpleNamespace(obs_dim=3, action_dim=1),
                      SimpleNamespace(hidden_sizes=[width, width], n_critics=n_critics,
                                      n_quantiles=32))
    layers = [[m for m in critic if isinstance(m, torch.nn.Linear)] for critic in critics.critics]
    weights = [torch.stack([c[i].weight.detach() for c in layers]).requires_grad_()
               for i in range(len(layers[0]))]
    biases = [torch.stack([c[i].bias.detach() for c in layers]).requires_grad_()
              for i in range(len(layers[0]))]
    obs, action = torch.randn(BATCH, 3), torch.rand(BATCH, 1) * 2 - 1

    def stacked_forward() -> torch.Tensor:  # [B, C, M] as Critics gives it
        x = torch.cat([obs, action], dim=-1).expand(n_critics, BATCH, 4)
        for i, (weight, bias) in enumerate(zip(weights, biases)):
            x = linear(x, weight, bias)
            if i < len(weights) - 1:
                x = torch.relu(x)
        return x.transpose(0, 1)

    with torch.no_grad():  # the same numbers both ways
        torch.testing.assert_close(stacked_forward(), critics(obs, action))
    return (lambda: critics(obs, action).sum().backward(),
            lambda: stacked_forward().sum().backward())


def main() -> None:
    parser = rounds_parser(__doc__.split("\n\n")[0], rounds=7, block=100, calls="passes")
    args = parser.parse_args()
    import torch

    torch.set_num_threads(1)
    print(f"ms per forward + backward of the critics ({args.clock} clock), median of "
          f"{args.rounds} rounds; stacked / looped, median of the rounds' ratios")
    for n_critics, width in ((2, 128), (2, 256), (5, 128), (5, 256)):
        looped, stacked = cases(n_critics, width)
        times = interleaved({"looped": calls(looped), "stacked": calls(stacked)}, args.rounds,
                            args.block, clock_named(args.clock), warm_up=10)
        ratio = median_ratio(times["stacked"], times["looped"])
        print(f"  {n_critics} critics, {width} x {width}: looped "
              f"{statistics.median(times['looped']):.3f}, stacked "
              f"{statistics.median(times['stacked']):.3f}  {ratio:.2f}x")


if __name__ == "__main__":
    main()
