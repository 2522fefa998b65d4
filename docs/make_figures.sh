#!/usr/bin/env bash
# Regenerate the figures of docs/guides/paper.md from a finished paper_table sweep:
#   bash docs/make_figures.sh outputs/multirun/paper_table_<date_time>
# It runs the sweep report (rs-lightning report: results table, figures, report.html
# and an offline W&B summary run, all in <sweep>/report/) and copies the figures the docs
# shows into docs/figures/. The distribution figures are those of the seed-0 RS-UMDQN-C job
# of each environment, at a state where the risk-averse and the expectation-seeking choices
# differ (rs_lightning.analysis.report.DECISION_CELLS).
set -euo pipefail
sweep="${1:?usage: bash docs/make_figures.sh <paper_table sweep folder>}"
out="$(dirname "$0")/figures"
mkdir -p "$out"
rs-lightning report "$sweep"
cp "$sweep/report/learning_curves.png" "$sweep/report/distribution_error.png" "$out/"
for env in risky_rewards risky_transitions risky_grid_world; do
  cp "$sweep/report/distributions_${env}_rs_umdqn_c.png" "$out/distributions_${env}.png"
done
echo "figures in $out; the whole report: $sweep/report/report.html"
