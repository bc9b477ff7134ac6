#!/usr/bin/env bash
# The OCN chapter's recipe (thesis §5.3, setting S1) on an accelerator: demonstrations, then behaviour cloning of
# OCN over several seeds beside the MoE and LSTM baselines (all side by side on one device), `tgjax eval craft`
# on each (thesis Table 5.2 and the imitation metrics), then PPO in option space on ACD over each run's options.
#
#   bash benchmarks/craft_table.sh                         # the thesis' recipe: batch 512, 2000 steps, 3 seeds
#   SEEDS="1" BC_STEPS=300 PPO_ITERS=100 bash benchmarks/craft_table.sh     # a short run (say so beside it)
#
# Environment: SEEDS ("1 2 3", OCN's training seeds), BASELINES ("moe lstm"), BC_STEPS (2000), DEMOS (6000 per
# task), PPO_TASK (ACD), PPO_ITERS (1500), for a fixed device slot BC_BY, EVAL_BY and DEADLINE (seconds from the
# start by which the cloning runs, the evaluations and everything stop; a stopped run's last checkpoints are what
# the next stage reads; unset = no limit), RUNS (runs/craft_table),
# PY (.venv/bin/python if present, else python3), EXTRA (more --config.a.b=v overrides for the BC runs, e.g. the
# smoke test's "--config.training.batch_size=32 --config.evaluation.interval_steps=10"). Logs, evaluation JSONs and a summary go to $OUT when set (the
# device tool's folder, as one results.tar.gz), else stay in $RUNS.
# The demonstrations are made on the host's CPU (three tasks side by side); the training runs share the device,
# each with its memory allocated as needed.
set -uo pipefail
SEEDS=${SEEDS:-"1 2 3"}
BASELINES=${BASELINES:-"moe lstm"}
BC_STEPS=${BC_STEPS:-2000}
DEMOS=${DEMOS:-6000}
PPO_TASK=${PPO_TASK:-ACD}
PPO_ITERS=${PPO_ITERS:-1500}
RUNS=${RUNS:-runs/craft_table}
if [ -z "${PY:-}" ]; then
  if [ -x .venv/bin/python ]; then PY=.venv/bin/python; else PY=python3; fi
fi
TGJAX=("$PY" -c "import sys; from tgjax.cli import main; sys.exit(main(sys.argv[1:]))")
export PYTHONUNBUFFERED=1 XLA_PYTHON_CLIENT_PREALLOCATE=false
mkdir -p "$RUNS/demos" "$RUNS/logs"
start=$(date +%s)
left() {  # seconds until $1 (seconds from the start; a large number when empty), at least 1
  if [ -z "${1:-}" ]; then echo 1000000; return; fi
  local l=$(( $1 - ($(date +%s) - start) )); echo $(( l > 1 ? l : 1 ))
}
stamp() { echo "[$(( $(date +%s) - start ))s] $*"; }

stamp "demonstrations: $DEMOS per task of AC, CD, DA"
seed=0  # the trainer's own: task i of data.tasks with data.seed + i
for task in AC CD DA; do
  [ -f "$RUNS/demos/$task.npz" ] || JAX_PLATFORMS=cpu timeout "$(left "${DEADLINE:-}")" "${TGJAX[@]}" data craft-demos --task "$task" \
    --num "$DEMOS" --seed "$seed" -o "$RUNS/demos/$task.npz" > "$RUNS/logs/demos_$task.log" 2>&1 &
  seed=$(( seed + 1 ))
done
wait
tail -n 1 "$RUNS"/logs/demos_*.log

COMMON=(--config configs/ocn_craft.py --config.data.demo_dir="$RUNS/demos" --config.data.generate=False
        --config.data.num_demos="$DEMOS" --config.training.num_steps="$BC_STEPS")
read -r -a EXTRA_ARGS <<< "${EXTRA:-}"
names=()
for seed in $SEEDS; do names+=("ocn_s$seed"); done
for kind in $BASELINES; do names+=("$kind"); done
stamp "behaviour cloning: ${names[*]} ($BC_STEPS steps each, side by side)"
for name in "${names[@]}"; do
  case $name in
    ocn_s*) args=(--config.training.seed="${name#ocn_s}") ;;
    *) args=(--config configs/ocn_craft.py:"$name") ;;
  esac
  timeout "$(left "${BC_BY:-${DEADLINE:-}}")" "${TGJAX[@]}" train "${COMMON[@]}" "${args[@]}" "${EXTRA_ARGS[@]}" --workdir "$RUNS/$name" \
    > "$RUNS/logs/bc_$name.log" 2>&1 &
done
wait
for name in "${names[@]}"; do echo "== $name"; tail -n 3 "$RUNS/logs/bc_$name.log"; done

stamp "tgjax eval craft on each run"
for name in "${names[@]}"; do
  timeout "$(left "${EVAL_BY:-${DEADLINE:-}}")" "${TGJAX[@]}" eval craft --workdir "$RUNS/$name" --episodes 200 --controller-tasks "$PPO_TASK" \
    > "$RUNS/logs/eval_$name.log" 2>&1 &
done
wait

stamp "PPO in option space on $PPO_TASK (sparse), $PPO_ITERS iterations, over each options run"
for name in "${names[@]}"; do
  [ "$name" = lstm ] && continue
  timeout "$(left "${DEADLINE:-}")" "${TGJAX[@]}" train --config configs/ocn_craft_rl.py:"$PPO_TASK" \
    --config.training.num_steps="$PPO_ITERS" --config.rl.options_workdir="$RUNS/$name" \
    --workdir "$RUNS/ppo_$name" > "$RUNS/logs/ppo_$name.log" 2>&1 &
done
wait
for name in "${names[@]}"; do
  [ -f "$RUNS/logs/ppo_$name.log" ] && { echo "== ppo $name"; tail -n 3 "$RUNS/logs/ppo_$name.log"; }
done
stamp "done"

if [ -n "${OUT:-}" ]; then
  (cd "$RUNS" && tar czf "$OUT/results.tar.gz" logs ./*/craft_eval.json ./*/metrics.jsonl ./*/tensorboard)
  ls -la "$OUT"
fi
