"""Environment steps per second of N copies of each of the package's worlds: gymnasium's
backend (grid worlds as NumPy tables, the others through SyncVectorEnv) against the torch
backend (:mod:`rs_lightning.envs.device_worlds`), in one process, block by block in
alternation.

    python benchmarks/device_worlds.py                        # N = 64, CPU, one thread
    python benchmarks/device_worlds.py --copies 4096 --device cuda

Each block steps the copies ``--steps`` times with random actions drawn beforehand, through
the interface the engine uses (NumPy actions in, NumPy arrays out: the torch backend's host
copy of every step included); ``device steps/s`` also times :meth:`step_tensors` alone (the
copies' cost when the engine keeps actions and answers on the device). The ratio is the
median of the per-block ratios (the machine may be shared: paired ratios are steadier).
"""

from __future__ import annotations

import argparse
import statistics
import time
from types import SimpleNamespace

import numpy as np
import torch

from rs_lightning.envs.copies import make_copies

WORLDS = {
    "risky_rewards": ("RiskyRewards-v0", None, {}),
    "risky_transitions": ("RiskyTransitions-v0", None, {}),
    "risky_grid_world": ("RiskyGridWorld-v0", None, {}),
    "two_stage": ("TwoStage-v0", None, {}),
    "cliff_walking": ("SlipperyCliffWalking-v0", 100, {"slip_probability": 0.03,
                                                       "cliff_reward": -5}),
    "trading": ("Trading-v0", 5, {}),
    "american_put": ("AmericanPut-v0", 8, {}),
    "risky_navigation": ("RiskyNavigation-v0", 100, {"gate": 0.25}),
}


def config(name: str, backend: str) -> SimpleNamespace:
    env_id, limit, kwargs = WORLDS[name]
    return SimpleNamespace(id=f"rs_lightning/{env_id}", kwargs=kwargs, max_episode_steps=limit,
                           observation_normalization="none", backend=backend)


def actions_for(name: str, copies: int, steps: int) -> np.ndarray:
    rng = np.random.default_rng(0)
    if name == "risky_navigation":
        return rng.uniform(-1, 1, (steps, copies, 2)).astype(np.float32)
    n = {"trading": 3, "american_put": 2}.get(name, 4)
    return rng.integers(0, n, (steps, copies))


def rate(copies, actions) -> float:
    start = time.perf_counter()
    for a in actions:
        copies.step(a)
    return len(actions) * len(copies) / (time.perf_counter() - start)


def device_rate(copies, actions: torch.Tensor, device: torch.device) -> float:
    if device.type == "cuda":
        torch.cuda.synchronize()
    start = time.perf_counter()
    for a in actions:
        copies.step_tensors(a)
    if device.type == "cuda":
        torch.cuda.synchronize()
    return len(actions) * len(copies) / (time.perf_counter() - start)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--copies", type=int, default=64)
    parser.add_argument("--steps", type=int, default=200)
    parser.add_argument("--blocks", type=int, default=5)
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--worlds", nargs="*", default=list(WORLDS))
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    device = torch.device(args.device)
    seeds = list(range(args.copies))
    print(f"N = {args.copies} copies, {args.steps} steps a block, {args.blocks} blocks, "
          f"{args.threads} torch thread(s), device {device}")
    print(f"{'world':18s} {'gymnasium/s':>12s} {'torch/s':>12s} {'ratio':>7s} "
          f"{'device steps/s':>15s}")
    for name in args.worlds:
        gym_copies = make_copies(config(name, "gymnasium"), seeds)
        torch_copies = make_copies(config(name, "torch"), seeds, device=device)
        actions = actions_for(name, args.copies, args.steps)
        on_device = torch.as_tensor(actions, device=device)
        rate(gym_copies, actions[:10]), rate(torch_copies, actions[:10])  # warm-up
        gym_rates, torch_rates, ratios, device_rates = [], [], [], []
        for _ in range(args.blocks):
            gym_rates.append(rate(gym_copies, actions))
            torch_rates.append(rate(torch_copies, actions))
            device_rates.append(device_rate(torch_copies, on_device, device))
            ratios.append(torch_rates[-1] / gym_rates[-1])
        print(f"{name:18s} {statistics.median(gym_rates):12,.0f} "
              f"{statistics.median(torch_rates):12,.0f} {statistics.median(ratios):6.2f}x "
              f"{statistics.median(device_rates):15,.0f}")


if __name__ == "__main__":
    main()
