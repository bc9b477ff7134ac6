#!/usr/bin/env bash
# Sharded evaluation: every host of the TPU VM runs `tgjax eval COMMAND ... --shard I/N` on its own
# shard (launch/host_eval.sh works out I from the worker number and N from the number of workers).
#
#   WORKDIR=gs://my-bucket/tgjax/tg_bllip launch/tpu_eval.sh -- sg [--suites DIR] [beam options]
#   WORKDIR=... launch/tpu_eval.sh -- blimp | parse --treebank F | score --input F | ...
#   INDEPENDENT_HOSTS=0 launch/tpu_eval.sh -- ...   # leave the TPU runtime's multi-host defaults
#   SSH_OUTPUT_DIR=eval_logs launch/tpu_eval.sh -- ...   # each host's output to eval_logs/<worker>.log
# Shards are written to OUTPUT_DIR (default WORKDIR/eval) as COMMAND.shard-I-of-N.EXT.
set -euo pipefail
HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
# shellcheck source=common.sh
source "$HERE/common.sh"
parse_common_args "$@"
: "${PASS_ENV:=}"
[[ -n "${SSH_OUTPUT_DIR:-}" && "$DRY_RUN" != 1 ]] && mkdir -p "$SSH_OUTPUT_DIR"
require_real WORKDIR
# shellcheck disable=SC2086
exports=$(env_exports WORKDIR OUTPUT_DIR GCS_MOUNT INDEPENDENT_HOSTS CHIPS_PER_HOST_BOUNDS $PASS_ENV)
on_all_workers "set -euo pipefail; cd $(quote "$REMOTE_DIR") && ${exports}bash launch/host_eval.sh${REST_ARGS[*]:+ $(quote "${REST_ARGS[@]}")}"
