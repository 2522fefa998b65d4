"""What compiling the rest of the update would give: the gradient clipping and Adam's step,
which ``hardware.compile`` leaves eager (it compiles each agent's loss, forward and backward),
timed against the engine's eager path on a CPU, in one process.

    python benchmarks/compiled_update.py                 # 7 rounds of 200 steps a case
    python benchmarks/compiled_update.py --rounds 9 --clock wall

Cases, on the same parameters and gradients (fixed; the first step clips them to norm 1, so
every later one scales them by about 1):

- ``engine``: what a run does after ``loss.backward()`` (``Learner._update``): the flat
  gradient buffer's clipping (``FlatGradients.clip``, norm 1) and ``LeanAdam``'s step (torch's
  fused Adam kernel on lists gathered once);
- ``torch``: ``clip_grad_norm_(foreach=True)`` and ``torch.optim.Adam(fused=True).step()``;
- ``compiled``: one ``torch.compile``d function doing both, the clipping and torch's
  functional Adam (``foreach``, ``capturable``: step counts and learning rate as tensors, so
  that a learning-rate schedule does not recompile), as a compiled update would run them.

Networks: DQN's on a grid world (2 -> 128 -> 128 -> 4, 17,540 parameters) and two critics of
Pendulum's 256 x 256 (4 -> 256 -> 256 -> 1, 133,634 parameters). After the rounds, the
compiled case's parameters are compared with the engine's (the same steps from the same
start). One torch thread; the ratio to ``engine`` is the median of the rounds' ratios.
"""

from __future__ import annotations

import copy
import statistics

from rounds import calls, clock_named, interleaved, median_ratio, rounds_parser

LR, EPS, MAX_NORM = 1e-4, 1e-5, 1.0


def networks():
    import torch

    from rs_lightning.agents.base import mlp

    torch.manual_seed(0)
    return {"dqn_128": torch.nn.ModuleList([mlp([2, 128, 128, 4])]),
            "critics_256": torch.nn.ModuleList([mlp([4, 256, 256, 1]) for _ in range(2)])}


def with_gradients(network):
    """A copy of ``network`` whose every parameter has a fixed gradient of total norm ~10."""
    import torch

    network = copy.deepcopy(network)
    generator = torch.Generator().manual_seed(1)
    for p in network.parameters():
        p.grad = torch.randn(p.shape, generator=generator) * 10 / p.numel() ** 0.5 / 3
    return network


def engine_case(network):
    from rs_lightning.agents.members import FlatGradients
    from rs_lightning.engine.learner import LeanAdam

    parameters = list(network.parameters())
    gradients = FlatGradients(parameters)
    optimizer = LeanAdam(parameters, lr=LR, eps=EPS, fused=True)

    def step() -> None:
        gradients.clip(MAX_NORM)
        optimizer.step()

    return step


def torch_case(network):
    import torch

    parameters = list(network.parameters())
    optimizer = torch.optim.Adam(parameters, lr=LR, eps=EPS, fused=True)

    def step() -> None:
        torch.nn.utils.clip_grad_norm_(parameters, MAX_NORM, foreach=True)
        optimizer.step()

    return step


def compiled_case(network):
    import torch
    from torch.optim.adam import adam

    params = list(network.parameters())
    grads = [p.grad for p in params]
    exp_avgs = [torch.zeros_like(p) for p in params]
    exp_avg_sqs = [torch.zeros_like(p) for p in params]
    steps = [torch.zeros(()) for _ in params]
    lr = torch.tensor(LR)

    @torch.compile
    def clip_and_step(params, grads, exp_avgs, exp_avg_sqs, steps, lr):
        norm = torch.linalg.vector_norm(torch.stack(torch._foreach_norm(grads)))
        torch._foreach_mul_(grads, (MAX_NORM / (norm + 1e-6)).clamp(max=1.0))
        adam(params, grads, exp_avgs, exp_avg_sqs, [], steps, foreach=True, capturable=True,
             amsgrad=False, beta1=0.9, beta2=0.999, lr=lr, weight_decay=0.0, eps=EPS,
             maximize=False)

    def step() -> None:
        with torch.no_grad():
            clip_and_step(params, grads, exp_avgs, exp_avg_sqs, steps, lr)

    return step


def main() -> None:
    parser = rounds_parser(__doc__.split("\n\n")[0], rounds=7, block=200, calls="steps")
    args = parser.parse_args()
    import time

    import torch
    import torch._dynamo

    torch.set_num_threads(1)
    print(f"us per clipping + Adam step ({args.clock} clock), median (min-max) over "
          f"{args.rounds} rounds; ratio to engine (median of the rounds' ratios)")
    for name, network in networks().items():
        copies = {case: with_gradients(network) for case in ("engine", "torch", "compiled")}
        cases = {"engine": calls(engine_case(copies["engine"])),
                 "torch": calls(torch_case(copies["torch"])),
                 "compiled": calls(compiled_case(copies["compiled"]))}
        start = time.perf_counter()
        cases["compiled"](1)  # compiles
        compile_seconds = time.perf_counter() - start
        torch._dynamo.utils.counters["stats"].clear()
        times = interleaved(cases, args.rounds, args.block, clock_named(args.clock))
        graphs = torch._dynamo.utils.counters["stats"]["unique_graphs"]
        # The engine's copy took one step fewer (the compiled one's first call).
        cases["engine"](1)
        difference = max((a - b).abs().max().item() for a, b in zip(
            copies["engine"].parameters(), copies["compiled"].parameters()))
        print(f"  {name} (compiled in {compile_seconds:.1f} s, {graphs} recompilations "
              f"while timed; after the same steps, parameters within {difference:.1e})")
        for case, values in times.items():
            print(f"    {case:9s} {1e3 * statistics.median(values):7.1f} "
                  f"({1e3 * min(values):.1f}-{1e3 * max(values):.1f})  "
                  f"{median_ratio(values, times['engine']):5.2f}x")


if __name__ == "__main__":
    main()
