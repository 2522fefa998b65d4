"""Throughput of K stacked members on one device, and an actor-critic on MuJoCo against
sb3-contrib's TQC on the same device.

    python benchmarks/gpu.py --out gpu.jsonl                       # every case on cuda
    python benchmarks/gpu.py --cases dqn --members 1 2 4 --device cpu --seconds 2

A step of a run with K members (``parallel_seeds=K``) is one environment step of each
member's copy and one gradient update of each member, as a user's run takes it (the real
Trainer of ``engine.build.make_trainer``, with the ``hardware`` preset of ``--device``). The
time per step is read after ``MARK`` updates, over ``--seconds`` seconds of updates (or
``--max-steps``), so start-up, warm-up and compilation of kernels are left out. Throughput
is K / (seconds per step): member-updates per second; ``scaling`` is that over K = 1's.

Cases (``--cases``):

- ``dqn``: DQN on the default grid world (the paper's settings, batch 32), K = ``--members``;
- ``tqc``: TQC on the risky navigation world (``experiment=risky_navigation``: 2 critics of
  25 quantiles, 64 x 64, batch 128), K = ``--members``;
- ``half_cheetah``: TQC on HalfCheetah-v5 (``experiment=half_cheetah``: 256 x 256, batch 256,
  2 critics of 25 quantiles, as sb3-contrib's) for K = 1 and 8, with 1,000 warm-up steps;
- ``sb3_tqc``: sb3-contrib's TQC with the RL Zoo's MuJoCo settings on HalfCheetah-v5, on the
  same device, 1,000 warm-up steps: its updates per second, one update per transition as ours.

Each case prints one JSON line and appends it to ``--out`` as soon as it is measured (a run
cut short keeps what it measured). ``benchmarks/RESULTS.md`` records the figures.
"""

from __future__ import annotations

import argparse
import gc
import json
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "src"))
sys.path.insert(0, str(ROOT / "benchmarks"))

MARK = 100  # updates before the clock starts: warm-up, cuBLAS handles, the first kernels
MEMBERS = [1, 2, 4, 8, 16, 32, 64, 128, 256]
WORLDS = {
    "dqn": ["agent=dqn"],
    "tqc": ["experiment=risky_navigation", "agent=tqc"],
    "half_cheetah": ["experiment=half_cheetah", "agent=tqc", "learning.warmup_steps=1000"],
}
CHEETAH_WARMUP = 1000


def _compose(world: list[str], members: int, device: str, max_steps: int):
    from hydra import compose, initialize_config_dir

    overrides = [
        *world,
        f"hardware={'gpu' if device == 'cuda' else 'cpu'}",
        "hardware.torch_threads=1",
        "logger=none",
        "callbacks.progress_bar=false",
        f"trainer.max_steps={max_steps}",
        "trainer.checkpoint_every_n_steps=0",
        "evaluation.every_n_steps=0",
        f"parallel_seeds={members}",
    ]
    with initialize_config_dir(config_dir=str(ROOT / "conf"), version_base="1.3"):
        return compose(config_name="train", overrides=overrides)


class StepClock:
    """The clock after update ``mark`` and after every later one (the device synchronised
    first); :meth:`tick` says to stop once ``seconds`` have passed since the mark."""

    def __init__(self, mark: int, seconds: float, device: str) -> None:
        self.mark, self.seconds, self.device = mark, seconds, device
        self.start = self.last = None
        self.steps = 0

    def _now(self) -> float:
        if self.device == "cuda":  # the step's kernels are done, not only queued
            import torch

            torch.cuda.synchronize()
        return time.perf_counter()

    def tick(self, update: int) -> bool:
        """The clock at the end of update number ``update``: False once time is up."""
        if update < self.mark:
            return True
        now = self._now()
        if self.start is None:
            self.start = now
            return True
        self.last, self.steps = now, self.steps + 1
        return now - self.start < self.seconds

    def lightning_callback(self):
        import pytorch_lightning as pl

        clock = self

        class Callback(pl.Callback):
            def on_train_batch_end(self, trainer, *args) -> None:
                if not clock.tick(trainer.global_step):
                    trainer.should_stop = True

        return Callback()

    def per_step(self) -> float | None:
        return None if not self.steps else (self.last - self.start) / self.steps


def time_members(case: str, members: int, device: str, seconds: float, max_steps: int) -> dict:
    """Seconds per step of a run of ``members`` stacked members of ``case``'s world."""
    import pytorch_lightning as pl
    import torch

    from rs_lightning.config.schema import validate
    from rs_lightning.engine.build import build, make_trainer, quiet_lightning

    quiet_lightning()
    settings = validate(_compose(WORLDS[case], members, device, max_steps))
    pl.seed_everything(0, verbose=False)
    if device == "cuda":
        torch.cuda.reset_peak_memory_stats()
    datamodule, module = build(settings)
    clock = StepClock(MARK, seconds, device)
    with tempfile.TemporaryDirectory() as run_dir:
        trainer = make_trainer(settings.train, Path(run_dir), [clock.lightning_callback()])
        began = time.perf_counter()
        trainer.fit(module, datamodule=datamodule)
        fit_seconds = time.perf_counter() - began
    per_step = clock.per_step()
    result = {
        "case": case, "members": members, "device": device,
        "stacked": type(module.members).__name__,
        "steps_timed": clock.steps,
        "ms_per_step": None if per_step is None else round(1e3 * per_step, 4),
        "member_updates_per_s": None if per_step is None else round(members / per_step, 1),
        "fit_seconds": round(fit_seconds, 2),
    }
    if device == "cuda":
        result["peak_gpu_mb"] = round(torch.cuda.max_memory_allocated() / 2**20, 1)
    del trainer, module, datamodule
    gc.collect()
    if device == "cuda":
        torch.cuda.empty_cache()
    return result


def time_sb3_tqc(device: str, seconds: float, seed: int = 0) -> dict:
    """sb3-contrib's TQC (the RL Zoo's MuJoCo settings, 1,000 warm-up steps) on
    HalfCheetah-v5: seconds per transition (one update each) after ``MARK`` updates."""
    import gymnasium as gym
    from peers import SB3_ZOO, without_log_folder
    from sb3_contrib import TQC
    from stable_baselines3.common.callbacks import BaseCallback

    settings = dict(SB3_ZOO["half_cheetah"]["sb3_tqc"], learning_starts=CHEETAH_WARMUP)
    model = without_log_folder(TQC("MlpPolicy", gym.make("HalfCheetah-v5"), seed=seed,
                                   device=device, verbose=0, **settings))
    clock = StepClock(MARK, seconds, device)

    class Clock(BaseCallback):
        def _on_step(self) -> bool:  # one update per transition after the warm-up
            return clock.tick(self.num_timesteps - CHEETAH_WARMUP)

    model.learn(total_timesteps=10**7, callback=Clock())
    per_step = clock.per_step()
    return {"case": "sb3_tqc", "members": 1, "device": device, "steps_timed": clock.steps,
            "ms_per_step": round(1e3 * per_step, 4),
            "member_updates_per_s": round(1 / per_step, 1)}


def device_facts(device: str) -> dict:
    import platform

    import pytorch_lightning as pl
    import torch

    facts = {"torch": torch.__version__, "lightning": pl.__version__,
             "python": platform.python_version(), "device": device}
    if device == "cuda":
        facts["gpu"] = torch.cuda.get_device_name(0)
    return facts


def summary(results: list[dict]) -> str:
    """The markdown table of the member sweeps: ms per step, member-updates per second and
    the scaling over one member, per case."""
    lines = ["| case | K | ms / step | member-updates / s | scaling over K = 1 | peak GPU MB |",
             "|---|---|---|---|---|---|"]
    single: dict[tuple[str, str], float] = {}
    for r in results:
        if r.get("member_updates_per_s") is None:
            continue
        key = (r["case"], r["device"])
        if r["members"] == 1:
            single[key] = r["member_updates_per_s"]
        scale = r["member_updates_per_s"] / single[key] if key in single else None
        lines.append(f"| {r['case']} ({r['device']}) | {r['members']} | {r['ms_per_step']:.2f} | "
                     f"{r['member_updates_per_s']:,.0f} | "
                     f"{'' if scale is None else f'{scale:.1f}x'} | {r.get('peak_gpu_mb', '')} |")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--cases", nargs="+", default=["dqn", "tqc", "half_cheetah", "sb3_tqc"],
                        choices=[*WORLDS, "sb3_tqc"])
    parser.add_argument("--members", type=int, nargs="+", default=MEMBERS,
                        help="K of the dqn and tqc sweeps (half_cheetah: 1 and 8)")
    parser.add_argument("--device", choices=("cuda", "cpu"), default="cuda")
    parser.add_argument("--seconds", type=float, default=4.0, help="timed seconds a case")
    parser.add_argument("--max-steps", type=int, default=100_000,
                        help="updates at most a case (the clock usually stops it first)")
    parser.add_argument("--out", type=Path, help="append each case's JSON line here")
    args = parser.parse_args(argv)

    import torch

    torch.set_num_threads(1)
    facts = device_facts(args.device)
    print(json.dumps(facts), flush=True)
    results = []
    for case in args.cases:
        sweep = [1, 8] if case == "half_cheetah" else [1] if case == "sb3_tqc" else args.members
        for members in sweep:
            try:
                if case == "sb3_tqc":
                    result = time_sb3_tqc(args.device, args.seconds)
                else:
                    result = time_members(case, members, args.device, args.seconds,
                                          args.max_steps)
            except Exception as error:  # noqa: BLE001 - the other cases still run
                result = {"case": case, "members": members, "device": args.device,
                          "error": f"{type(error).__name__}: {error}"}
            result.update(facts)
            results.append(result)
            print(json.dumps(result), flush=True)
            if args.out:
                with args.out.open("a") as file:
                    file.write(json.dumps(result) + "\n")
    print(summary(results))
    cheetah = [r["member_updates_per_s"] for r in results
               if r["case"] in ("half_cheetah", "sb3_tqc") and r["members"] == 1
               and r.get("member_updates_per_s")]
    if len(cheetah) == 2:
        print(f"our TQC / sb3-contrib TQC, updates per second on {args.device}: "
              f"{cheetah[0] / cheetah[1]:.2f}x")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
