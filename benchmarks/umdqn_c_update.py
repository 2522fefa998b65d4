"""Time the UMDQN-C update: the authors' per-return quadrature vs the fast lattice vs DQN.

    python benchmarks/umdqn_c_update.py                    # 1 and 2 threads, grid-world batches
    python benchmarks/umdqn_c_update.py --threads 1 --repeats 11 --authors-steps 3
    python benchmarks/umdqn_c_update.py --threads 1 --compiled-integrand --skip-accuracy

Every measurement runs in a fresh subprocess (its own thread setting and peak memory).
Batches are replay samples of the risky-rewards grid world under a random policy (terminal
goals, rewards clipped to [-2, 2]); ``fast (worst batch)`` also puts rewards of -2 and +2 on
non-terminal transitions, so its Bellman targets reach the full (z -/+ 2) / 0.9 = +-4.45.

- ``update``: loss + backward + grad-norm clip 1 + fused Adam step (lr 1e-4, eps 1e-5);
- ``step``: a plain-PyTorch training step, greedy act (argmax U, alpha 0.5, VaR 0.1) + env step
  + replay write and sample + update;
- ``authors' update``: the same loss with F computed as the authors do, a separate 51-node
  Clenshaw-Curtis quadrature of integral_0^z f for every return, sample and action (online
  and target, acting grid and shifted returns), every row of the batch, no state reuse.

DQN and the fast update are timed in the same process, block by block in alternation, and
each ratio is the median of the per-block ratios: the machine is shared, so paired ratios are
steadier than ratios of medians. Peak memory is the rise of the process's peak RSS over the
updates (resource.getrusage), one process per method.
"""

from __future__ import annotations

import argparse
import copy
import json
import resource
import statistics
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import torch
from omegaconf import OmegaConf

from rounds import interleaved, median_ratio

ROOT = Path(__file__).resolve().parents[1]
BATCH = 32
RETURN_MIN, RETURN_MAX, GAMMA, REWARD_CLIP = -2.0, 2.0, 0.9, 2.0


# ------------------------------------------------------------------------------ set-up


def build(name: str, **overrides):
    from rs_lightning.agents import AGENTS, Problem

    agent_class, config_class = AGENTS[name]
    values = OmegaConf.to_container(OmegaConf.load(ROOT / "conf" / "agent" / f"{name}.yaml"))
    values.update(overrides)
    problem = Problem(2, 4, GAMMA, RETURN_MIN, RETURN_MAX)
    torch.manual_seed(0)
    agent = agent_class(config_class(**values), problem)
    target = copy.deepcopy(agent).requires_grad_(False).eval()
    optimizer = torch.optim.Adam(agent.parameters(), lr=1e-4, eps=1e-5, fused=True)
    return agent, target, optimizer


class Replay:
    """A small ring buffer of the risky-rewards grid world."""

    def __init__(self, seed: int = 0, capacity: int = 10_000) -> None:
        import gymnasium as gym

        from rs_lightning.envs import GRID_WORLDS

        self.env = gym.make(GRID_WORLDS["risky_rewards"])
        self.obs, _ = self.env.reset(seed=seed)
        self.rng = np.random.default_rng(seed)
        self.capacity, self.size, self.cursor = capacity, 0, 0
        self.data = {
            "obs": torch.zeros(capacity, 2),
            "action": torch.zeros(capacity, dtype=torch.int64),
            "reward": torch.zeros(capacity),
            "next_obs": torch.zeros(capacity, 2),
            "terminated": torch.zeros(capacity),
        }

    def step(self, action: int) -> None:
        next_obs, reward, terminated, truncated, _ = self.env.step(action)
        row = self.cursor
        self.data["obs"][row] = torch.from_numpy(self.obs)
        self.data["action"][row] = action
        self.data["reward"][row] = float(np.clip(reward, -REWARD_CLIP, REWARD_CLIP))
        self.data["next_obs"][row] = torch.from_numpy(next_obs)
        self.data["terminated"][row] = float(terminated)
        self.cursor = (row + 1) % self.capacity
        self.size = min(self.size + 1, self.capacity)
        self.obs = next_obs if not (terminated or truncated) else self.env.reset()[0]

    def fill(self, steps: int) -> None:
        for _ in range(steps):
            self.step(int(self.rng.integers(4)))

    def sample(self):
        from rs_lightning.agents import Transitions

        index = torch.from_numpy(self.rng.integers(self.size, size=BATCH))
        fields = {key: value[index] for key, value in self.data.items()}
        return Transitions(**fields, discount=GAMMA * (1.0 - fields["terminated"]))


def worst_case(batch):
    """Rewards -2 and +2 on two non-terminal transitions: targets reach +-4.45."""
    reward, terminated = batch.reward.clone(), batch.terminated.clone()
    reward[:2] = torch.tensor([-REWARD_CLIP, REWARD_CLIP])
    terminated[:2] = 0.0
    return batch._replace(reward=reward, terminated=terminated,
                          discount=GAMMA * (1.0 - terminated))


def authors_loss(agent, target, batch, choose_action):
    """The loss with every F by a separate 51-node Clenshaw-Curtis quadrature per return."""
    from rs_lightning.agents.umdqn_c import mse_loss, step_cdf
    from rs_lightning.risk import from_cdf

    z = agent.return_grid
    rows = torch.arange(batch.reward.shape[0])
    with torch.no_grad():
        action = choose_action(from_cdf(z, target.cdf_by_quadrature(batch.next_obs, z)))
        shifted = (z.unsqueeze(0) - batch.reward.unsqueeze(1)) / GAMMA
        bootstrap = target.cdf_by_quadrature(batch.next_obs, shifted)[rows, action]
        y = torch.where(batch.terminated.unsqueeze(1) > 0, step_cdf(batch.reward, z), bootstrap)
    cdf = agent.cdf_by_quadrature(batch.obs, z)[rows, batch.action]
    return mse_loss(y, cdf)


def make_update(agent, target, optimizer, choose_action, authors: bool = False):
    def update(batch) -> None:
        if authors:
            loss = authors_loss(agent, target, batch, choose_action)
        else:
            loss, _ = agent.loss(batch, target, choose_action)
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(agent.parameters(), 1.0, foreach=True)
        optimizer.step()

    return update


def make_step(agent, update, replay, choose_action):
    def step() -> None:
        obs = torch.from_numpy(replay.obs).unsqueeze(0)
        action = int(agent.greedy_action(obs, choose_action)[0])
        replay.step(action)
        update(replay.sample())

    return step


def peak_rss_mb() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024.0


# ------------------------------------------------------------------------------ workers


def worker_timing(threads: int, repeats: int, block: int, compiled_integrand: bool = False) -> dict:
    """DQN and the fast UMDQN-C, updates and training steps, blocks in alternation;
    ``compiled_integrand``: also the fast update with the integrand on its lattice compiled
    (``torch.compile(dynamic=True)``, online and target networks; compiled in the warm-up)."""
    from rs_lightning.risk import Utility

    torch.set_num_threads(threads)
    choose_action = Utility(0.5, "var", {"rho": 0.1}).greedy
    replay = Replay()
    replay.fill(2_000)
    batches = [replay.sample() for _ in range(block)]
    worst = [worst_case(b) for b in batches]
    jobs = {}
    for name, key in (("dqn", "dqn"), ("rs_umdqn_c", "fast")):
        agent, target, optimizer = build(name)
        update = make_update(agent, target, optimizer, choose_action)
        jobs[f"{key} update"] = (update, batches)
        if key == "fast":
            jobs["fast update (worst batch)"] = (update, worst)
        jobs[f"{key} step"] = (make_step(agent, update, replay, choose_action), None)
        if key == "fast" and compiled_integrand:
            agent, target, optimizer = build(name)
            for network in (agent.network, target.network):
                network.integrand_on_lattice = torch.compile(network.integrand_on_lattice,
                                                             dynamic=True)
            jobs["fast update (integrand compiled)"] = (
                make_update(agent, target, optimizer, choose_action), batches)

    def case(fn, data):
        def run(n: int) -> None:  # the block's batches in order (or steps of the replay)
            for i in range(n):
                fn(data[i]) if data is not None else fn()

        return run

    times = interleaved({key: case(*job) for key, job in jobs.items()}, repeats, block,
                        time.perf_counter, warm_up=block)
    pairs = {f"fast {kind} / dqn {kind}": (f"fast {kind}", f"dqn {kind}")
             for kind in ("update", "step")}
    if compiled_integrand:
        pairs["fast update (integrand compiled) / fast update"] = (
            "fast update (integrand compiled)", "fast update")
    return {
        "threads": threads,
        "median_ms": {key: statistics.median(v) for key, v in times.items()},
        "all_ms": times,
        "median_ratio": {name: median_ratio(times[a], times[b]) for name, (a, b) in pairs.items()},
    }


def worker_single(method: str, threads: int, steps: int) -> dict:
    """One method alone in its process: median time of ``steps`` updates and peak memory."""
    from rs_lightning.risk import Utility

    torch.set_num_threads(threads)
    choose_action = Utility(0.5, "var", {"rho": 0.1}).greedy
    replay = Replay()
    replay.fill(2_000)
    batches = [replay.sample() for _ in range(steps + 1)]
    name = "dqn" if method == "dqn" else "rs_umdqn_c"
    agent, target, optimizer = build(name)
    update = make_update(agent, target, optimizer, choose_action, authors=method == "authors")
    if method == "fast_worst":
        batches = [worst_case(b) for b in batches]
    before = peak_rss_mb()
    times = []
    for batch in batches:
        start = time.perf_counter()
        update(batch)
        times.append((time.perf_counter() - start) * 1e3)
    return {
        "method": method,
        "threads": threads,
        "median_ms": statistics.median(times[1:]),  # the first includes lazy initialisation
        "peak_rss_rise_mb": peak_rss_mb() - before,
    }


def worker_accuracy() -> dict:
    """Largest |F_fast - F_exact| over the 9 cells, 4 actions and returns of the acting grid
    and of the Bellman-target reach, for a fresh network and after 300 fast updates; the
    authors' 51-node Clenshaw-Curtis for comparison. Exact: float64, 16-point Gauss-Legendre
    on 32 panels of [0, z] for every return."""
    from rs_lightning.risk import Utility

    torch.set_num_threads(1)
    choose_action = Utility(0.5, "var", {"rho": 0.1}).greedy
    replay = Replay()
    replay.fill(2_000)
    agent, target, optimizer = build("rs_umdqn_c")
    update = make_update(agent, target, optimizer, choose_action)
    cells = torch.tensor([[x, y] for x in range(3) for y in range(3)], dtype=torch.float32)
    z = torch.cat([agent.return_grid, torch.linspace(-4.45, 4.45, 90)]).sort().values
    result = {}
    for label in ("fresh", "after 300 updates"):
        if label != "fresh":
            for _ in range(300):
                update(replay.sample())
        exact_agent = copy.deepcopy(agent).double()
        with torch.no_grad():
            exact = exact_agent.cdf_by_quadrature(
                cells.double(), z.double(), n_nodes=16, panels=32, rule="gauss_legendre"
            )
            fast = agent.cdf(cells, z).double()
            authors = agent.cdf_by_quadrature(cells, z).double()
        result[label] = {
            "fast": float((fast - exact).abs().max()),
            "authors_cc51": float((authors - exact).abs().max()),
        }
    return result


# ------------------------------------------------------------------------------ driver


def spawn(*args: str) -> dict:
    command = [sys.executable, __file__, "--worker", *args]
    output = subprocess.run(command, check=True, capture_output=True, text=True).stdout
    return json.loads(output.strip().splitlines()[-1])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--threads", type=int, nargs="+", default=[1, 2])
    parser.add_argument("--repeats", type=int, default=9, help="alternating blocks per job")
    parser.add_argument("--block", type=int, default=40, help="updates per timed block")
    parser.add_argument("--authors-steps", type=int, default=3)
    parser.add_argument("--skip-accuracy", action="store_true")
    parser.add_argument("--compiled-integrand", action="store_true",
                        help="also time the fast update with the integrand compiled")
    parser.add_argument("--worker", nargs="+", help=argparse.SUPPRESS)
    args = parser.parse_args()

    if args.worker:
        kind, *rest = args.worker
        if kind == "timing":
            result = worker_timing(int(rest[0]), int(rest[1]), int(rest[2]), rest[3] == "1")
        elif kind == "single":
            result = worker_single(rest[0], int(rest[1]), int(rest[2]))
        else:
            result = worker_accuracy()
        print(json.dumps(result))
        return

    print(f"torch {torch.__version__}, batch {BATCH}, 200 returns, 4 actions; medians\n")
    for threads in args.threads:
        timing = spawn("timing", str(threads), str(args.repeats), str(args.block),
                       str(int(args.compiled_integrand)))
        singles = {
            method: spawn("single", method, str(threads), str(steps))
            for method, steps in (
                ("dqn", 200),
                ("fast", 100),
                ("fast_worst", 100),
                ("authors", args.authors_steps),
            )
        }
        ms = timing["median_ms"]
        print(f"== {threads} thread(s)")
        for key, value in ms.items():
            print(f"  {key:28s} {value:9.3f} ms")
        authors_ms = singles["authors"]["median_ms"]
        print(f"  {'authors update':28s} {authors_ms:9.1f} ms  ({args.authors_steps} updates)")
        for key, value in timing["median_ratio"].items():
            print(f"  ratio {key:30s} {value:7.2f}")
        print(f"  ratio {'authors update / fast update':30s} {authors_ms / ms['fast update']:7.0f}")
        print(f"  ratio {'authors update / dqn update':30s} {authors_ms / ms['dqn update']:7.0f}")
        print("  peak RSS rise during the updates (own process each):")
        for method, result in singles.items():
            print(
                f"    {method:12s} {result['peak_rss_rise_mb']:8.1f} MB"
                f"   (alone: {result['median_ms']:.3f} ms per update)"
            )
        print()
    if not args.skip_accuracy:
        accuracy = spawn("accuracy")
        print("max |F - F_exact| (9 cells x 4 actions x returns in [-4.45, 4.45]):")
        for label, errors in accuracy.items():
            print(
                f"  {label:18s} fast {errors['fast']:.2e}   "
                f"authors' CC51 {errors['authors_cc51']:.2e}"
            )


if __name__ == "__main__":
    main()
