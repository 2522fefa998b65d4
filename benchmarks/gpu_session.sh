#!/usr/bin/env bash
# What a session lent a CUDA GPU runs, in one go (benchmarks/RESULTS.md records its figures):
# the GPU presets end to end from the command line (a discrete and a continuous agent,
# 32-bit and mixed precision, stacked members), an exact resume on the GPU, then
# benchmarks/gpu.py (K stacked members for K = 1..256; TQC on HalfCheetah against sb3-contrib's).
#   OUT=<folder> bash benchmarks/gpu_session.sh
# The runs log to CSV (logger=csv): W&B is not needed for what is measured here.
set -u
OUT=${OUT:-/tmp/gpu_session}
RUNS=/tmp/gpu_runs
mkdir -p "$OUT" "$RUNS"
export PYTHONUNBUFFERED=1 PYTHONWARNINGS=ignore
unset MUJOCO_GL  # nothing is rendered: no OpenGL backend is needed (egl fails without libEGL)
summary="$OUT/cli.txt"
# GPU=cpu MIXED=cpu BENCH=0: the same commands on a CPU (a check of the script itself).
GPU=${GPU:-gpu} MIXED=${MIXED:-gpu_mixed} BENCH=${BENCH:-1}

run() {  # run <name> <overrides...>: a training run in $RUNS/<name>; its eval.json to the summary
    local name=$1; shift
    local began=$SECONDS
    python3 train.py logger=csv callbacks.progress_bar=false "hydra.run.dir=$RUNS/$name" "$@" \
        > "$RUNS/$name.log" 2>&1
    local status=$?
    echo "== $name (exit $status, $((SECONDS - began)) s): $*" >> "$summary"
    if [ $status -ne 0 ]; then tail -5 "$RUNS/$name.log" >> "$summary"; fi
    find "$RUNS/$name" -name eval.json | sort | while read -r f; do
        echo "$f: $(python3 -c "import json,sys; d=json.load(open(sys.argv[1])); print({k: d[k] for k in ('expectation', 'utility', 'exact_utility', 'per_decision_path', 'steps') if k in d})" "$f")" >> "$summary"
    done
}

nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv > "$OUT/gpu.txt" 2>&1

# The presets end to end.
run default_gpu hardware=$GPU trainer.max_steps=2000
run qr_dqn_gpu_mixed hardware=$MIXED agent=qr_dqn trainer.max_steps=2000
run dsac_gpu experiment=risky_navigation agent=dsac risk=cvar alpha=0 hardware=$GPU trainer.max_steps=2000
run tqc_gpu_mixed_k4 experiment=risky_navigation agent=tqc hardware=$MIXED parallel_seeds=4 trainer.max_steps=1500
# Exact resume on the GPU: a run of 2,000 updates, and a new run from its checkpoint at 1,000.
run resume_full hardware=$GPU agent=c51 trainer.max_steps=2000 trainer.checkpoint_every_n_steps=1000
run resume_from_1000 hardware=$GPU agent=c51 trainer.max_steps=2000 trainer.checkpoint_every_n_steps=1000 \
    "ckpt_path=$RUNS/resume_full/checkpoints/step0001000.ckpt"
python3 - "$RUNS" >> "$summary" 2>&1 <<'EOF'
import json, sys
from pathlib import Path
full, resumed = (json.loads((Path(sys.argv[1]) / name / "eval.json").read_text())
                 for name in ("resume_full", "resume_from_1000"))
keys = sorted(k for k in full if k not in ("training_seconds", "wall_seconds", "seconds"))
differ = [k for k in keys if full[k] != resumed.get(k)]
print("resume on the GPU: eval.json", "identical" if not differ else f"differs in {differ}")
EOF

# K stacked members, and HalfCheetah against sb3-contrib.
[ "$BENCH" = 1 ] && python3 benchmarks/gpu.py --out "$OUT/gpu.jsonl" --seconds 3 2>&1 | grep -v -i "warning" | tee "$OUT/gpu_bench.txt"
