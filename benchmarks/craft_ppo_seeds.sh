#!/usr/bin/env bash
# OCN against the flat LSTM on sparse ACD (thesis §5.3, Fig. 5.5: "far above the baselines"), over seeds, at the
# `:mid` CPU scale of docs/ocn-craft.md: per model and seed, behaviour cloning of OCN (`ocn_craft.py:mid`) and of the LSTM
# (`:mid,lstm`), STEPS steps each, then PPO on ACD with sparse reward, ITERS iterations: in option space over
# the OCN's frozen options, in action space from the LSTM's cloned policy (the thesis does not say whether its LSTM
# starts from imitation; docs/ocn-craft.md's one seed from scratch returned 0.000). PARALLEL (2) jobs at a time;
# the table is each PPO run's last evaluation (64 selection episodes, and the held-out ones that rank nothing).
#
#   bash benchmarks/craft_ppo_seeds.sh                  # SEEDS="1 2 3" STEPS=3000 ITERS=300 RUNS=runs/craft_ppo_seeds
#
# On 2 CPU cores about 30 minutes of cloning per OCN run, 10 per LSTM run, 1-2 of PPO; the table goes to
# $RUNS/table.txt.
set -euo pipefail
cd "$(dirname "$0")/.."
SEEDS=${SEEDS:-"1 2 3"}
STEPS=${STEPS:-3000}
ITERS=${ITERS:-300}
RUNS=${RUNS:-runs/craft_ppo_seeds}
if [ -z "${PY:-}" ]; then
  if [ -x .venv/bin/python ]; then PY=.venv/bin/python; else PY=python3; fi
fi
mkdir -p "$RUNS"
one_model() {  # MODEL SEED: cloning, then PPO on sparse ACD
  local model=$1 seed=$2 bc rl
  bc=$RUNS/${model}_bc_seed$seed
  rl=$RUNS/${model}_ppo_seed$seed
  if [ "$model" = ocn ]; then
    "$PY" -m tgjax.cli train --config configs/ocn_craft.py:mid --config.training.seed="$seed" \
      --config.training.num_steps="$STEPS" --workdir "$bc" --quiet > "$bc.log" 2>&1
    "$PY" -m tgjax.cli train --config configs/ocn_craft_rl.py:ACD --config.training.seed="$seed" \
      --config.training.num_steps="$ITERS" --config.rl.options_workdir="$bc" --workdir "$rl" --quiet > "$rl.log" 2>&1
  else
    "$PY" -m tgjax.cli train --config configs/ocn_craft.py:mid,lstm --config.training.seed="$seed" \
      --config.training.num_steps="$STEPS" --workdir "$bc" --quiet > "$bc.log" 2>&1
    "$PY" -m tgjax.cli train --config configs/lstm_craft_rl.py:ACD --config.training.seed="$seed" \
      --config.training.num_steps="$ITERS" --config.rl.policy_workdir="$bc" --workdir "$rl" --quiet > "$rl.log" 2>&1
  fi
  echo "[$(( $(date +%s) - start ))s] $model seed $seed done"
}
export -f one_model
export RUNS STEPS ITERS PY start=$(date +%s)
# The OCN runs first (about 3x the LSTM's time each), PARALLEL at a time: the LSTM runs fill the gaps.
jobs=()
for seed in $SEEDS; do jobs+=("ocn $seed"); done
for seed in $SEEDS; do jobs+=("lstm $seed"); done
printf '%s\n' "${jobs[@]}" | xargs -P "${PARALLEL:-2}" -L 1 bash -c 'one_model "$0" "$1"'
"$PY" - "$RUNS" "$SEEDS" <<'EOF' | tee "$RUNS/table.txt"
import json, sys
from pathlib import Path
from tgjax.reproduce.verdict import judge, spread
runs, seeds = Path(sys.argv[1]), sys.argv[2].split()
print("model  seed  iteration  return (selection)  held-out return  held-out success")
found = {}
for model in ("ocn", "lstm"):
    for seed in seeds:
        records = [json.loads(l) for l in (runs / f"{model}_ppo_seed{seed}" / "metrics.jsonl").read_text().splitlines()]
        last = [r for r in records if r.get("split") == "valid"][-1]
        found.setdefault(model, []).append(last["heldout_return"])
        print(f"{model:5}  {seed:>4}  {last['step']:>9}  {last['return']:18.3f}  {last['heldout_return']:15.3f}  "
              f"{last['heldout_success_rate']:16.3f}")
for model, values in found.items():
    print(f"{model}: held-out return {spread(values).text(3)}")
verdict, why = judge(found["ocn"], found["lstm"])
print(f"OCN above the LSTM (thesis Fig. 5.5): {verdict} ({why})")
EOF
