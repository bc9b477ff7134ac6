#!/usr/bin/env bash
# One accelerator slot of the reproduction ledger: move a claim's paper-scale recipe on from its kept pack.
#
#   bash benchmarks/ledger_slot.sh prepare                 # here, once per checkout: wheels, data, commit -> .carry/
#   bash benchmarks/ledger_slot.sh run CLAIM... [BUDGET_S]  # on the accelerator (device run, carry [".carry"])
#   bash benchmarks/ledger_slot.sh keep FILES_AT            # here, after the run: the new packs and records kept
#
# The kept state of a claim lives in reproduction/packs/CLAIM-paper/ (the `tgjax reproduce --output` folder of its
# last call: state.tar.gz.NNN parts and manifest.json), committed, so that the next slot, from any later checkout,
# continues it with --resume-from. The accelerator's machine has JAX, flax, optax and orbax but not every package
# tgjax needs, nor ../shared/data, nor the checkout's .git; `prepare` puts what is missing into .carry/ (ignored by
# git, about 8 MiB):
#   .carry/whl/        wheels for the device's Python 3.12 on x86-64 (grain, array-record, ml-collections,
#                      portpicker, tensorboardX), downloaded here (PyPI is reachable here, not there)
#   .carry/data.tgz    ../shared/data/ordered_memory (ListOps test set, the logic files), gzipped
#   .carry/commit      the commit the slot runs, recorded with its record (TGJAX_COMMIT)
# `run` installs the wheels under /tmp/site (where PY lacks grain or ml_collections), unpacks the data beside the
# checkout (where the configs look for it), then, for each CLAIM side by side on the one device (a D = 128 or
# 200 model at batch 128 uses a small part of it; how much two at once slow each other is for the first
# slot's log to tell), `tgjax reproduce CLAIM --scale paper --budget-s BUDGET_S`, resuming from the claim's kept
# pack if there is one.
# It writes $OUT/CLAIM/ (each claim's new pack), $OUT/runs.jsonl (the calls' records) and $OUT/log.txt (OUT: the
# device tool's folder; out/ledger_slot elsewhere): with two claims 7 files at most (om-logic-length's pack has
# two parts), inside the device tool's 8; om-logic-length and om-systematicity together (two parts each) make 8.
# A guard sends each call SIGTERM 60 s past the budget: it then packs what it has and stops (exit 143), so a slot
# never loses its training. BUDGET_S defaults to 480: a 600-s device call less the start-up (wheels, imports, data)
# and the pack. EXTRA: more `tgjax reproduce` arguments (EXTRA=--tiny PY=.venv/bin/python runs the whole path here,
# on the CPU, in a minute or two).
# `keep` copies each FILES_AT/CLAIM/ over reproduction/packs/CLAIM-paper/ and appends FILES_AT/runs.jsonl to
# reproduction/runs.jsonl; then regenerate the ledger (tgjax reproduce --ledger) and commit.
set -euo pipefail
cd "$(dirname "$0")/.."
mode=${1:-}
WHEELS=(grain==0.2.18 array-record==0.8.6 ml-collections==1.1.0 portpicker==1.6.0 tensorboardX==2.6.5)
PLATFORMS=(--platform manylinux_2_28_x86_64 --platform manylinux_2_27_x86_64 --platform manylinux_2_24_x86_64
           --platform manylinux_2_17_x86_64 --platform manylinux2014_x86_64 --platform manylinux1_x86_64)

case "$mode" in
prepare)
  mkdir -p .git/info .carry/whl
  grep -qx '/.carry/' .git/info/exclude 2>/dev/null || echo '/.carry/' >> .git/info/exclude
  python3 -m pip download -q --no-deps --only-binary=:all: --python-version 3.12 --implementation cp \
    "${PLATFORMS[@]}" -d .carry/whl "${WHEELS[@]}"
  data=../shared/data/ordered_memory
  [ -d "$data" ] || { echo "ledger_slot.sh: $data not found (the Ordered Memory claims read it)" >&2; exit 1; }
  tar czf .carry/data.tgz -C ../shared/data ordered_memory
  commit=$(git rev-parse --short HEAD)
  [ -z "$(git status --porcelain --untracked-files=no)" ] || commit="$commit+dirty"
  echo "$commit" > .carry/commit
  du -sh .carry
  echo "prepared .carry/ for commit $commit: run CLAIM on the device with carry [\".carry\"]"
  ;;
run)
  shift
  claims=()
  while [ $# -gt 0 ] && ! [[ $1 =~ ^[0-9]+$ ]]; do claims+=("$1"); shift; done
  [ ${#claims[@]} -gt 0 ] || { echo "usage: ledger_slot.sh run CLAIM [CLAIM ...] [BUDGET_S]" >&2; exit 2; }
  budget=${1:-480}
  dest=${OUT:-out/ledger_slot}
  mkdir -p "$dest"
  exec > >(tee "$dest/log.txt") 2>&1
  start=$(date +%s)
  PY=${PY:-python3}
  if [ -d .carry/whl ] && ! "$PY" -c "import grain, ml_collections" 2>/dev/null; then  # the device lacks them
    "$PY" -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site \
      .carry/whl/*.whl
    export PYTHONPATH=/tmp/site${PYTHONPATH:+:$PYTHONPATH}
  fi
  if [ ! -d ../shared/data/ordered_memory ] && [ -f .carry/data.tgz ]; then
    mkdir -p ../shared/data && tar xzf .carry/data.tgz -C ../shared/data
  fi
  if [ -f .carry/commit ]; then TGJAX_COMMIT=$(cat .carry/commit); export TGJAX_COMMIT; fi
  # What the calls will run on, in the log; a package still missing stops here, in one line.
  "$PY" -c "import jax, flax, optax, orbax.checkpoint, grain, ml_collections, tgjax.cli
print('jax', jax.__version__, 'flax', flax.__version__, 'optax', optax.__version__, 'grain', grain.__version__,
      '|', jax.devices()[0].device_kind)"
  # Several claims share the device side by side (each run is small next to it), memory taken as needed.
  export PYTHONUNBUFFERED=1 XLA_PYTHON_CLIENT_PREALLOCATE=false
  echo "ledger slot: ${claims[*]} at paper scale, budget ${budget} s; set-up $(( $(date +%s) - start )) s"
  pids=()
  for claim in "${claims[@]}"; do
    kept=reproduction/packs/$claim-paper
    resume=()
    [ -f "$kept/manifest.json" ] && resume=(--resume-from "$kept")
    echo "[$claim] ${resume[*]:-a fresh start}"
    # shellcheck disable=SC2086  # EXTRA: words
    timeout --signal=TERM --kill-after=30 $(( budget + 60 )) \
      "$PY" -m tgjax.cli reproduce "$claim" --scale paper --budget-s "$budget" "${resume[@]}" \
        --output "$dest/$claim" --results "$dest/runs.jsonl" ${EXTRA:-} 2>&1 | sed -u "s/^/[$claim] /" &
    pids+=($!)
  done
  status=0
  for pid in "${pids[@]}"; do wait "$pid" || status=$?; done
  echo "ledger slot: exit $status after $(( $(date +%s) - start )) s"
  ls -la "$dest"/*/ 2>/dev/null || true
  exit "$status"
  ;;
keep)
  files_at=${2:?usage: ledger_slot.sh keep FILES_AT}
  found=0
  for pack in "$files_at"/*/; do
    [ -f "$pack/manifest.json" ] || continue
    claim=$(basename "$pack")
    kept=reproduction/packs/$claim-paper
    rm -rf "$kept" && mkdir -p "$kept"
    cp "$pack"/* "$kept"/
    echo "kept $kept"
    found=$((found + 1))
  done
  [ "$found" -gt 0 ] || { echo "ledger_slot.sh: no pack (a folder with manifest.json) in $files_at" >&2; exit 1; }
  if [ -f "$files_at/runs.jsonl" ]; then cat "$files_at/runs.jsonl" >> reproduction/runs.jsonl; fi
  du -sh reproduction/packs/*
  echo "now: .venv/bin/python -m tgjax.reproduce.ledger, then commit reproduction/ and docs/reproduction.md"
  ;;
*)
  sed -n 2,6p "$0" >&2
  exit 2
  ;;
esac
