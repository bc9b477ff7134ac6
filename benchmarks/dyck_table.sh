#!/usr/bin/env bash
# Pushdown Layers' Table 1 (Dyck, §4.1) on an accelerator: train Pushdown-LM and Base-LM (with the attachment
# head) side by side on one device, then `tgjax eval dyck` on both, beside the paper's numbers.
#
#   bash benchmarks/dyck_table.sh                  # the paper's recipe: 6 x 128, 100k strings, 10 000 steps
#   STEPS=2000 WARMUP=400 bash benchmarks/dyck_table.sh    # a short run (say so beside its numbers)
#
# Needs nothing outside the checkout (the strings are generated; the package downloads nothing).
# Environment: STEPS (10000), WARMUP (8000, the release's: warm-up then cosine to 0 over the rest),
# BEAM (50, the release's beam over the prefix for --tape model), LIMIT (all examples; N = first N per set),
# RUNS (runs/dyck_table), PY (.venv/bin/python if present, else python), EXTRA (more --config.a.b=v overrides for
# both runs, e.g. the smoke test's "--config.data.dyck_num_train=100 --config.model.num_layers=1"). Results and logs go to $OUT when set
# (the device tool's folder), else to $RUNS. Each run gets ~45% of the device memory (two processes at once).
set -euo pipefail
STEPS=${STEPS:-10000}
WARMUP=${WARMUP:-8000}
BEAM=${BEAM:-50}
RUNS=${RUNS:-runs/dyck_table}
if [ -z "${PY:-}" ]; then
  if [ -x .venv/bin/python ]; then PY=.venv/bin/python; else PY=python; fi
fi
DEST=${OUT:-$RUNS}
mkdir -p "$RUNS" "$DEST"
LIMIT_ARGS=()
if [ -n "${LIMIT:-}" ]; then LIMIT_ARGS=(--limit "$LIMIT"); fi
SCHEDULE=(--config.training.num_steps="$STEPS" --config.training.lr_schedule.kwargs.warmup_steps="$WARMUP"
          --config.training.lr_schedule.kwargs.cosine_cycle_length=$((STEPS - WARMUP))
          --config.checkpointing.interval_steps=$(( STEPS / 10 > 0 ? STEPS / 10 : 1 ))
          --config.evaluation.interval_steps=$(( STEPS / 10 > 0 ? STEPS / 10 : 1 )))
read -r -a EXTRA_ARGS <<< "${EXTRA:-}"
SCHEDULE+=("${EXTRA_ARGS[@]}")
export XLA_PYTHON_CLIENT_MEM_FRACTION=${XLA_PYTHON_CLIENT_MEM_FRACTION:-0.45}
start=$(date +%s)
"$PY" -m tgjax.cli train --config configs/pushdown_dyck.py --workdir "$RUNS/pushdown" "${SCHEDULE[@]}" \
  > "$DEST/train_pushdown.log" 2>&1 &
pushdown_pid=$!
"$PY" -m tgjax.cli train --config configs/pushdown_dyck.py:base --workdir "$RUNS/base" "${SCHEDULE[@]}" \
  > "$DEST/train_base.log" 2>&1 &
base_pid=$!
status=0
wait "$pushdown_pid" || status=$?
wait "$base_pid" || status=$?
echo "training: $(( $(date +%s) - start )) s (both runs at once); exit $status"
tail -n 3 "$DEST/train_pushdown.log" "$DEST/train_base.log"
[ "$status" -eq 0 ] || exit "$status"
for kind in pushdown base; do
  t0=$(date +%s)
  "$PY" -m tgjax.cli eval dyck --workdir "$RUNS/$kind" --beam-size "$BEAM" "${LIMIT_ARGS[@]}" \
    -o "$DEST/dyck_$kind.json" 2> "$DEST/eval_$kind.log" | tee "$DEST/dyck_$kind.txt"
  echo "eval $kind: $(( $(date +%s) - t0 )) s"
done
t0=$(date +%s)
"$PY" -m tgjax.cli eval dyck --workdir "$RUNS/pushdown" --tape gold "${LIMIT_ARGS[@]}" \
  -o "$DEST/dyck_pushdown_gold.json" 2> "$DEST/eval_pushdown_gold.log" | tee "$DEST/dyck_pushdown_gold.txt"
echo "eval pushdown (gold tape): $(( $(date +%s) - t0 )) s; total $(( $(date +%s) - start )) s"
