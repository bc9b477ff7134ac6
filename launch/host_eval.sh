#!/usr/bin/env bash
# Runs ON a host, from the repository root: this host's shard of a sharded evaluation,
# `tgjax eval ... --shard I/N`. launch/tpu_eval.sh runs it on every host at once.
#
#   CONFIG=tg_bllip WORKDIR=gs://bucket/tgjax/tg_bllip launch/host_eval.sh [eval arguments ...]
#
# I/N: SHARD_INDEX/SHARD_COUNT when set; else, on a Cloud TPU VM, this worker's number and the
# number of workers from the VM metadata; else SLURM_PROCID/SLURM_NTASKS; else 0/1.
# INDEPENDENT_HOSTS=1 (TPU slices) makes each host's JAX use only its own chips, so the hosts
# need not start together (the libtpu TPU_* bounds variables; CHIPS_PER_HOST_BOUNDS, default
# 2,2,1 = 4 chips, as v4/v5p/v5e/v6e multi-host slices have).
# Output goes where the eval command says (the eval command arrives in a later issue; until
# then this prints what it would run if `tgjax eval` does not exist).
set -euo pipefail
HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
usage() { sed -n '2,15p' "${BASH_SOURCE[0]}" | sed 's/^# \{0,1\}//'; }
# shellcheck source=common.sh
source "$HERE/common.sh"
parse_common_args "$@"
cd "$HERE/.."

: "${VENV:=.venv}"
: "${INDEPENDENT_HOSTS:=0}"
: "${CHIPS_PER_HOST_BOUNDS:=2,2,1}"
METADATA=http://metadata.google.internal/computeMetadata/v1/instance/attributes
metadata() { curl -sf -m 2 -H "Metadata-Flavor: Google" "$METADATA/$1" 2>/dev/null; }

if [[ -z "${SHARD_INDEX:-}" || -z "${SHARD_COUNT:-}" ]]; then
  if worker=$(metadata agent-worker-number) && endpoints=$(metadata worker-network-endpoints); then
    SHARD_INDEX=$worker
    SHARD_COUNT=$(tr ',' '\n' <<<"$endpoints" | grep -c .)
  elif [[ -n "${SLURM_PROCID:-}" ]]; then
    SHARD_INDEX=$SLURM_PROCID SHARD_COUNT=${SLURM_NTASKS:?}
  else
    SHARD_INDEX=0 SHARD_COUNT=1
  fi
fi
if ! [[ "$SHARD_INDEX" =~ ^[0-9]+$ && "$SHARD_COUNT" =~ ^[0-9]+$ ]] || ((SHARD_INDEX >= SHARD_COUNT)); then
  echo "bad shard $SHARD_INDEX/$SHARD_COUNT" >&2; exit 2
fi

if [[ "$INDEPENDENT_HOSTS" == 1 ]]; then
  export TPU_PROCESS_BOUNDS=1,1,1 TPU_HOST_BOUNDS=1,1,1 TPU_CHIPS_PER_PROCESS_BOUNDS="$CHIPS_PER_HOST_BOUNDS"
  export TPU_WORKER_ID=0 TPU_WORKER_HOSTNAMES=localhost
  [[ "$DRY_RUN" == 1 ]] && echo "export TPU_PROCESS_BOUNDS=1,1,1 TPU_HOST_BOUNDS=1,1,1 TPU_CHIPS_PER_PROCESS_BOUNDS=$CHIPS_PER_HOST_BOUNDS TPU_WORKER_ID=0 TPU_WORKER_HOSTNAMES=localhost"
fi

cmd=("$VENV/bin/tgjax" eval --config "$(config_path "$CONFIG")" --workdir "$WORKDIR" \
     --shard "$SHARD_INDEX/$SHARD_COUNT" "${REST_ARGS[@]}")
echo "$(hostname): shard $SHARD_INDEX/$SHARD_COUNT" >&2
if [[ "$DRY_RUN" != 1 ]] && ! "$VENV/bin/tgjax" eval --help >/dev/null 2>&1; then
  echo "tgjax eval is not available in this checkout yet; would run: $(quote "${cmd[@]}")" >&2
  exit 3
fi
run "${cmd[@]}"
