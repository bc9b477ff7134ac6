#!/usr/bin/env bash
# Stops (STOP_ONLY=1) or deletes the TPU VM. Deleting is the only way to stop paying for a pod slice;
# checkpoints in a gs:// WORKDIR survive it.
#
#   TPU_NAME=tgjax-v4 launch/tpu_delete.sh            # delete (asks no question)
#   STOP_ONLY=1 launch/tpu_delete.sh                   # stop a single-host VM, keep its disk
#   QUEUED=1 launch/tpu_delete.sh                      # delete the queued resource and its node
set -euo pipefail
HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
# shellcheck source=common.sh
source "$HERE/common.sh"
parse_common_args "$@"

: "${STOP_ONLY:=0}"
: "${QUEUED:=0}"
if [[ "$STOP_ONLY" == 1 ]]; then
  run gcloud compute tpus tpu-vm stop "$TPU_NAME" "${TPU_FLAGS[@]}"
elif [[ "$QUEUED" == 1 ]]; then
  run gcloud compute tpus queued-resources delete "${QUEUED_RESOURCE_ID:-$TPU_NAME-qr}" "${TPU_FLAGS[@]}" --force --quiet
else
  run gcloud compute tpus tpu-vm delete "$TPU_NAME" "${TPU_FLAGS[@]}" --quiet
fi
