"""The cost of one gradient update on Pendulum-v1 (batch 256): our actor-critics against
Stable-Baselines3's SAC, at the zoo's 256 x 256 networks and at 64 x 64, in one process.

    python benchmarks/actor_critic_update.py             # 5 rounds of 20 updates a case
    python benchmarks/actor_critic_update.py --widths 128   # 128 x 128 beside 256 x 256
    python benchmarks/actor_critic_update.py --rounds 9 --clock wall
    python benchmarks/actor_critic_update.py --compiled   # and ours at 256 x 256 compiled

Ours: ``experiment=pendulum`` (``agent.hidden_sizes`` set per case), built as a run builds
it, one update being ``Members.loss``, backward, clipping, Adam and the Polyak step of the
targets, on random batches. SB3: ``SAC.train`` with the zoo's learning rate after 300 steps
of ``learn``. Every case runs a block of updates in turn, round after round, and the ratio
to SB3 SAC at 256 x 256 is the median of the per-round ratios. The clock is the process's
CPU time by default (a machine whose cores other work shares), one torch thread.
"""

from __future__ import annotations

import statistics
from pathlib import Path

from rounds import clock_named, interleaved, median_ratio, rounds_parser

ROOT = Path(__file__).resolve().parents[1]
BATCH = 256


def ours(agent: str, width: int, compiled: bool = False):
    import pytorch_lightning as pl
    import torch
    from hydra import compose, initialize_config_dir

    from rs_lightning.config.schema import validate
    from rs_lightning.engine.build import build, quiet_lightning
    from rs_lightning.types import Transitions

    quiet_lightning()
    with initialize_config_dir(config_dir=str(ROOT / "conf"), version_base="1.3"):
        config = compose(config_name="train", overrides=[
            "experiment=pendulum", f"agent={agent}", "logger=none", "alpha=1",
            f"agent.hidden_sizes=[{width},{width}]", f"hardware.compile={str(compiled).lower()}"])
    pl.seed_everything(0, verbose=False)
    _, module = build(validate(config))
    optimizer = module.configure_optimizers()
    members, choose_action = module.members, module.utility.greedy
    generator = torch.Generator().manual_seed(0)

    def update() -> None:
        terminated = (torch.rand(1, BATCH, generator=generator) < 0.01).float()
        batch = Transitions(
            torch.randn(1, BATCH, 3, generator=generator),
            torch.rand(1, BATCH, 1, generator=generator) * 2 - 1,
            torch.randn(1, BATCH, generator=generator),
            torch.randn(1, BATCH, 3, generator=generator), terminated, 0.99 * (1 - terminated))
        losses, _ = members.loss(batch, module.target_members, choose_action)
        members.zero_gradients()
        losses.sum().backward()
        members.clip_gradients(100.0)
        optimizer.step()
        module._update_targets()

    return lambda n: [update() for _ in range(n)]


def sb3_sac(width: int):
    import gymnasium as gym
    from stable_baselines3 import SAC

    model = SAC("MlpPolicy", gym.make("Pendulum-v1"), learning_rate=1e-3, verbose=0, seed=0,
                policy_kwargs={"net_arch": [width, width]})
    model.learn(300)
    return lambda n: model.train(gradient_steps=n, batch_size=BATCH)


def main() -> None:
    parser = rounds_parser(__doc__.split("\n\n")[0], rounds=5, block=20, calls="updates")
    parser.add_argument("--widths", type=int, nargs="+", default=[64, 256],
                        help="hidden layer widths, each case at each (256 is always one)")
    parser.add_argument("--compiled", action="store_true",
                        help="also ours at 256 x 256 with hardware.compile=true (its warm-up "
                             "compiles, outside the timed rounds)")
    args = parser.parse_args()
    import torch

    torch.set_num_threads(1)
    cases = {}
    for width in sorted(set(args.widths) | {256}):
        cases.update({f"ours_dsac_{width}": ours("dsac", width),
                      f"ours_tqc_{width}": ours("tqc", width), f"sb3_sac_{width}": sb3_sac(width)})
    if args.compiled:
        cases.update(ours_dsac_256_compiled=ours("dsac", 256, compiled=True),
                     ours_tqc_256_compiled=ours("tqc", 256, compiled=True))
    times = interleaved(cases, args.rounds, args.block, clock_named(args.clock))
    reference = times["sb3_sac_256"]
    print(f"ms per update ({args.clock} clock), median (min-max) over {args.rounds} rounds; "
          "ratio to sb3_sac_256 (median of the rounds' ratios)")
    for name, values in times.items():
        ratio = median_ratio(values, reference)
        print(f"  {name:22s} {statistics.median(values):8.2f} ({min(values):.2f}-"
              f"{max(values):.2f})  {ratio:5.2f}x")


if __name__ == "__main__":
    main()
