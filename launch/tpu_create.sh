#!/usr/bin/env bash
# Creates a Cloud TPU VM (one host, e.g. v4-8) or pod slice (several hosts, e.g. v4-32).
#
#   PROJECT=my-proj ZONE=us-central2-b TPU_NAME=tgjax-v4 ACCELERATOR_TYPE=v4-32 launch/tpu_create.sh
#   SPOT=1 launch/tpu_create.sh          # a Spot TPU (cheaper, may be preempted: re-create and re-run to resume)
#   QUEUED=1 launch/tpu_create.sh        # through a queued resource (waits for capacity instead of failing)
#   launch/tpu_create.sh --dry-run       # print the command only
set -euo pipefail
HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
# shellcheck source=common.sh
source "$HERE/common.sh"
parse_common_args "$@"

: "${SPOT:=0}"
: "${QUEUED:=0}"
: "${SCOPES:=https://www.googleapis.com/auth/cloud-platform}"  # lets the hosts read/write gs:// (IAM still applies)
: "${SERVICE_ACCOUNT:=}"

extra=(--scopes="$SCOPES")
[[ -n "$SERVICE_ACCOUNT" ]] && extra+=(--service-account="$SERVICE_ACCOUNT")
[[ "$SPOT" == 1 ]] && extra+=(--spot)

if [[ "$QUEUED" == 1 ]]; then
  run gcloud compute tpus queued-resources create "${QUEUED_RESOURCE_ID:-$TPU_NAME-qr}" "${TPU_FLAGS[@]}" \
    --node-id="$TPU_NAME" --accelerator-type="$ACCELERATOR_TYPE" --runtime-version="$RUNTIME_VERSION" \
    "${extra[@]}" "${REST_ARGS[@]}"
  echo "# wait until ACTIVE:  gcloud compute tpus queued-resources describe ${QUEUED_RESOURCE_ID:-$TPU_NAME-qr} --zone=$ZONE" >&2
else
  run gcloud compute tpus tpu-vm create "$TPU_NAME" "${TPU_FLAGS[@]}" \
    --accelerator-type="$ACCELERATOR_TYPE" --version="$RUNTIME_VERSION" "${extra[@]}" "${REST_ARGS[@]}"
fi
