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
# (the device tool's folder), else to $RUNS. Each run gets ~45% of the device memory (two processes at once);
# the evaluations (one process per run, tape and set: base, pushdown own tape, pushdown gold tape) all start at
# once with memory allocated as needed (SEQUENTIAL=1 runs them one after another). On the H200 (this repository's
# one run of it, with both batching switches in EXTRA) compiling the six bucket widths took 2m54s per run, then
# 53-63 steps/s each.
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
# Compiled programs persist across runs in RUNS/jax_cache: a run resumed on the same machine (the same command
# again) skips the minutes of compiling, and so do the evaluations' teacher-forced passes of the same widths.
export JAX_COMPILATION_CACHE_DIR=${JAX_COMPILATION_CACHE_DIR:-$RUNS/jax_cache}
start=$(date +%s)
export XLA_PYTHON_CLIENT_MEM_FRACTION=${XLA_PYTHON_CLIENT_MEM_FRACTION:-0.45}
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
unset XLA_PYTHON_CLIENT_MEM_FRACTION
export XLA_PYTHON_CLIENT_PREALLOCATE=false
# The evaluations (17), one process per (run, tape, set), all at once (SEQUENTIAL=1: one after another, e.g. on a CPU).
# On the H200 the own-tape sets took 136-158 s each with seven evaluations sharing the GPU. The scores go to
# $RUNS/dyck_RUN_TAPE_SET.json, the table to $DEST/dyck_table.txt.
SETS=(dyck50 dyck100 dyck200 dyck300 depth)
jobs=()
for set in "${SETS[@]}"; do
  jobs+=("base model $set" "pushdown gold $set" "pushdown model $set")
done
# In distribution (no paper figure): did each model learn the training language? Not with the own tape: a beam
# over 500 prefixes would cost more than the five sets.
jobs+=("base model valid" "pushdown gold valid")
t0=$(date +%s)
for job in "${jobs[@]}"; do
  read -r kind tape set <<< "$job"
  name="${kind}_${tape}_${set}"
  "$PY" -m tgjax.cli eval dyck --workdir "$RUNS/$kind" --sets "$set" --tape "$tape" --beam-size "$BEAM" \
    "${LIMIT_ARGS[@]}" -o "$RUNS/dyck_$name.json" > "$RUNS/eval_$name.txt" 2> "$RUNS/eval_$name.log" &
  if [ "${SEQUENTIAL:-0}" = 1 ]; then wait; fi
done
wait
for kind_tape in "base model" "pushdown model" "pushdown gold"; do
  read -r kind tape <<< "$kind_tape"
  echo "== $kind, tape: $tape"
  sets=("${SETS[@]}"); [ "$tape" = model ] && [ "$kind" = pushdown ] || sets+=(valid)
  for set in "${sets[@]}"; do grep -E "^(Dyck|Depth|In-distribution)" "$RUNS/eval_${kind}_${tape}_${set}.txt" || echo "$set: failed, see $RUNS/eval_${kind}_${tape}_${set}.log"; done
done | tee "$DEST/dyck_table.txt"
echo "evaluations: $(( $(date +%s) - t0 )) s; total $(( $(date +%s) - start )) s"
