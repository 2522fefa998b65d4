#!/usr/bin/env bash
# Regenerate the README's figures from a finished paper_table sweep:
#   bash docs/make_figures.sh outputs/multirun/paper_table_<date_time>
# Distribution figures come from the seed-0 RS-UMDQN-C job of each environment, at a state
# where the risk-averse and the expectation-seeking choices differ.
set -euo pipefail
sweep="${1:?usage: bash docs/make_figures.sh <paper_table sweep folder>}"
out="$(dirname "$0")/figures"
mkdir -p "$out"
job() { ls -d "$sweep"/*"agent=$1,env=$2,seed=0" | head -1; }
python -m rs_lightning.plots distributions "$(job rs_umdqn_c risky_rewards)" --cell 2,1 \
  --out "$out/distributions_risky_rewards.png"
python -m rs_lightning.plots distributions "$(job rs_umdqn_c risky_transitions)" --cell 1,0 \
  --out "$out/distributions_risky_transitions.png"
python -m rs_lightning.plots distributions "$(job rs_umdqn_c risky_grid_world)" --cell 1,0 \
  --out "$out/distributions_risky_grid_world.png"
if ls "$sweep"/*/eval_history.jsonl >/dev/null 2>&1; then
  python -m rs_lightning.plots curves "$sweep" --out "$out/learning_curves.png"
fi
