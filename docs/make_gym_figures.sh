#!/usr/bin/env bash
# Regenerate the cliff-walking figures of docs/guides/environments.md from a finished alpha sweep:
#   bash docs/make_gym_figures.sh outputs/multirun/cliff_alpha_sweep
# made by (docs/guides/environments.md, "Cliff walking: risk-averse against risk-neutral"):
#   python train.py -m env=cliff_walking env.kwargs.slip_probability=0.02 agent=c51 risk=cvar \
#       alpha=1.0,0.2,0.6,0.4,0.8 seed=0 parallel_seeds=5 evaluation.episodes=2000 \
#       evaluation.episodes_during_training=100 evaluation.every_n_steps=5000 \
#       hydra.sweep.dir=outputs/multirun/cliff_alpha_sweep
# It draws E against VaR over alpha (mean and spread over the 5 seeds of each job) and the
# cells visited by the greedy policies of alpha = 1 and alpha = 0.2 (5 seeds pooled each).
set -euo pipefail
sweep="${1:?usage: bash docs/make_gym_figures.sh <cliff-walking alpha sweep folder>}"
out="$(dirname "$0")/figures"
mkdir -p "$out"
rs-lightning gym-results tradeoff "$sweep" --out "$out/cliff_tradeoff.png"
job() { find "$sweep" -maxdepth 1 -type d -name "*alpha=$1,*" | head -n 1; }
rs-lightning gym-results heatmap "$(job 1.0)" "$(job 0.2)" --episodes 200 \
    --out "$out/cliff_heatmap.png"
echo "figures in $out"
