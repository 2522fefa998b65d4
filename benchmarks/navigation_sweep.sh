#!/usr/bin/env bash
# Many seeds of the risky navigation world at once, one process and one core each: the
# screen behind the continuous guide's table of DSAC settings at alpha 0, for a machine with
# many cores (16: 15 single-seed runs on the CPU and one stacked run on the GPU).
#   OUT=<folder> bash benchmarks/navigation_sweep.sh
# Each setting trains seeds 0-4 (experiment=risky_navigation agent=dsac risk=cvar alpha=0
# <setting> seed=<s>); $OUT/routes.txt has each run's route at every evaluation, and
# $OUT/runs.tgz the runs without their checkpoints. Variables:
#   SETTINGS      "<name>:<overrides>" entries separated by ';' (below: the first round's)
#   STACKED       1: one more run of the first setting, its 5 seeds stacked on $GPU; empty: none
#   SEEDS         the seeds (0 1 2 3 4); SECONDS_EACH: each run's time limit (515)
#   EXTRA         overrides for every run; RUNS: where the runs go; PYTHON: the interpreter
set -u
OUT=${OUT:-/tmp/navigation_sweep}
RUNS=${RUNS:-/tmp/navigation_runs}
SECONDS_EACH=${SECONDS_EACH:-515}
GPU=${GPU:-gpu}
PYTHON=${PYTHON:-python3}
SETTINGS=${SETTINGS:-"one_critic:agent.n_critics=1;temperature_1:agent.initial_temperature=1.0;three_step:learning.n_step=3"}
STACKED=${STACKED-1}
mkdir -p "$OUT" "$RUNS"
export PYTHONUNBUFFERED=1 PYTHONWARNINGS=ignore
BASE=(experiment=risky_navigation agent=dsac risk=cvar rho=0.1 alpha=0 logger=none
      callbacks.progress_bar=false evaluation.every_n_steps=5000 evaluation.episodes=300
      ${EXTRA:-})

train() {  # train <name> <overrides...>
    local name=$1; shift
    timeout "$SECONDS_EACH" "$PYTHON" train.py "${BASE[@]}" "hydra.run.dir=$RUNS/$name" "$@" \
        > "$RUNS/$name.log" 2>&1
    echo "$name exit $?" >> "$OUT/exits.txt"
}

IFS=';' read -r -a settings <<< "$SETTINGS"
for seed in ${SEEDS:-0 1 2 3 4}; do
    for setting in "${settings[@]}"; do
        read -r -a overrides <<< "${setting#*:}"
        train "${setting%%:*}_$seed" "${overrides[@]}" seed=$seed hardware=cpu &
    done
done
if [ -n "$STACKED" ]; then
    read -r -a overrides <<< "${settings[0]#*:}"
    train "${settings[0]%%:*}_stacked_$GPU" "${overrides[@]}" seed=0 parallel_seeds=5 hardware=$GPU &
fi
wait

"$PYTHON" - "$RUNS" > "$OUT/routes.txt" 2>&1 <<'PY'
import json, sys
from pathlib import Path

def route(record):  # A: every episode on the goal unstruck; C: crosses; x: strays or stalls
    if record["risk_outcome_green"] == 1.0:
        return "A"
    return "C" if record["risk_outcome_orange"] > 0.5 and record["expectation"] > -3 else "x"

for run in sorted(p for p in Path(sys.argv[1]).iterdir() if p.is_dir()):
    for history in sorted(run.rglob("eval_history.jsonl")):
        records = [json.loads(line) for line in history.read_text().splitlines()]
        trail = " ".join(f"{r['step'] // 1000}k:{route(r)}{r['expectation']:.2f}" for r in records)
        final = history.parent / "eval.json"
        end = json.loads(final.read_text()) if final.exists() else None
        last = f"final {route(end)} E {end['expectation']:.3f}" if end else "no final evaluation"
        print(f"{run.name}/{history.parent.name}: {last} | {trail}")
PY
tar czf "$OUT/runs.tgz" -C "$RUNS" --exclude='*.ckpt' . 2>/dev/null
cat "$OUT/routes.txt"
