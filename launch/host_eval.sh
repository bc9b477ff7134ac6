#!/usr/bin/env bash
# Runs ON a host, from the repository root: this host's shard of a sharded evaluation,
# `tgjax eval COMMAND --workdir WORKDIR --shard I/N --output OUTPUT_DIR/COMMAND.EXT [arguments]`.
# launch/tpu_eval.sh runs it on every host at once.
#
#   WORKDIR=gs://bucket/tgjax/tg_bllip launch/host_eval.sh sg [--suites DIR] [beam options]
#   WORKDIR=... launch/host_eval.sh blimp | parse --treebank F | score --input F | ppl --proposals P | ...
#
# I/N: SHARD_INDEX/SHARD_COUNT when set; else, on a Cloud TPU VM, this worker's number and the
# number of workers from the VM metadata; else SLURM_PROCID/SLURM_NTASKS; else 0/1. Each command
# puts the shard into its output's name (sg.shard-00001-of-00004.json); OUTPUT_DIR defaults to
# WORKDIR/eval, so on a slice with a gs:// WORKDIR (read directly; the outputs go through a gcsfuse
# mount of OUTPUT_DIR's bucket, as evaluation writes local files) the shards land side by side; then `tgjax eval COMMAND --merge ...` (sg, blimp, parse) or `tgjax eval merge`.
# INDEPENDENT_HOSTS=1 (the default) makes each host's JAX use only its own chips, so the shards are
# independent jobs (the libtpu TPU_* bounds variables; CHIPS_PER_HOST_BOUNDS, default 2,2,1 = 4
# chips, as v4/v5p/v5e/v6e multi-host slices have); 0 leaves the runtime's defaults.
set -euo pipefail
HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
# shellcheck source=common.sh
source "$HERE/common.sh"
parse_common_args "$@"
cd "$HERE/.."

: "${VENV:=.venv}"
: "${INDEPENDENT_HOSTS:=1}"
: "${CHIPS_PER_HOST_BOUNDS:=2,2,1}"
require_real WORKDIR
set -- "${REST_ARGS[@]}"
COMMAND="${1:-}"
case "$COMMAND" in
  score|ppl|rerank|blimp) EXT=jsonl ;;
  sg) EXT=json ;;
  parse) EXT=txt ;;
  *) echo "host_eval.sh: expected an eval command (score, ppl, rerank, parse, sg, blimp), got '$COMMAND'" >&2
     exit 2 ;;
esac
shift

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

# The model is read from WORKDIR as it is (a gs:// run through orbax and etils.epath, its committed steps only);
# the outputs are written with local file operations, so a gs:// OUTPUT_DIR goes through a gcsfuse mount.
workdir="$WORKDIR"
: "${OUTPUT_DIR:=$WORKDIR/eval}"
output_dir="$(local_path "$OUTPUT_DIR")"
mount_bucket_of "$OUTPUT_DIR"
run mkdir -p "$output_dir"
cmd=("$VENV/bin/tgjax" eval "$COMMAND" --workdir "$workdir" --shard "$SHARD_INDEX/$SHARD_COUNT"
     --output "$output_dir/$COMMAND.$EXT" "$@")
echo "$(hostname): shard $SHARD_INDEX/$SHARD_COUNT" >&2
run "${cmd[@]}"
