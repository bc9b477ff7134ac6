#!/usr/bin/env bash
# Starts `tgjax train` on every host of the TPU VM at once (--worker=all), in the background with a
# log on each host (launch/host_train.sh); the trainer calls jax.distributed.initialize() itself.
# Re-running the same command resumes from the latest checkpoint in WORKDIR.
#
#   CONFIG=tg_bllip WORKDIR=gs://my-bucket/tgjax/tg_bllip \
#   DATA_URI=gs://my-bucket/data/bllip_lg TRAIN_FILE=train.txt VALID_FILE=valid.txt \
#     launch/tpu_train.sh [-- --config.training.num_steps=100000 ...]
#   DETACH=0 launch/tpu_train.sh        # stay attached, output of every host here
#   RESTART=1 launch/tpu_train.sh       # stop a run that is going, then start (it resumes)
#   launch/tpu_train.sh --dry-run
# Passed to the hosts when set: CONFIG WORKDIR DATA_URI DATA_DIR TRAIN_FILE VALID_FILE DETACH
# RESTART STOP_TIMEOUT LOG_DIR, and anything named in PASS_ENV (e.g. PASS_ENV="JAX_COMPILATION_CACHE_DIR XLA_FLAGS").
# A gs:// WORKDIR goes to the trainer as it is: checkpoints, metrics and the rest are written to the bucket
# directly (no mount).
set -euo pipefail
HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
# shellcheck source=common.sh
source "$HERE/common.sh"
parse_common_args "$@"
require_real WORKDIR
: "${PASS_ENV:=}"
# DISTRIBUTED=1: the trainer calls jax.distributed.initialize(), which finds the slice's hosts itself.
export DISTRIBUTED=1
# shellcheck disable=SC2086
exports=$(env_exports CONFIG WORKDIR DATA_URI DATA_DIR TRAIN_FILE VALID_FILE DETACH RESTART STOP_TIMEOUT LOG_DIR \
  DISTRIBUTED $PASS_ENV)
on_all_workers "set -euo pipefail; cd $(quote "$REMOTE_DIR") && ${exports}bash launch/host_train.sh${REST_ARGS[*]:+ $(quote "${REST_ARGS[@]}")}"
