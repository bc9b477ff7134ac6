#!/usr/bin/env bash
# Single-host GPU recipe: install (once) and train in the foreground on this machine's GPUs.
# Run from anywhere inside a checkout; WORKDIR may be a local directory or gs:// (written directly, no
# mount; the install adds the Cloud Storage clients).
#
#   CONFIG=tg_ptb WORKDIR=runs/tg_ptb DATA_URI=$HOME/data/ptb TRAIN_FILE=train.txt VALID_FILE=valid.txt \
#     launch/gpu_train.sh [-- --config.x.y=v ...]
#   ACCEL=cuda13 launch/gpu_train.sh ...     # CUDA 13 wheels (needs a driver >= 580); default cuda12
#   CUDA_VISIBLE_DEVICES=0 launch/gpu_train.sh ...
#   INSTALL=0 launch/gpu_train.sh ...        # skip the install step
#   launch/gpu_train.sh --dry-run
# The same re-run resumes from the latest checkpoint in WORKDIR. DETACH=1 runs it in the background
# with a log in ~/tgjax_logs, as on TPU hosts.
set -euo pipefail
HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
_config="${CONFIG:-tg_bllip}"; _config="${_config##*/}"
: "${WORKDIR:=runs/${_config%.py}}"   # a local directory by default here
# shellcheck source=common.sh
source "$HERE/common.sh"
parse_common_args "$@"
: "${ACCEL:=cuda12}" "${INSTALL:=1}"
export ACCEL DRY_RUN CONFIG WORKDIR
# JAX preallocates 75% of GPU memory by default; this keeps that explicit and adjustable.
export XLA_PYTHON_CLIENT_MEM_FRACTION="${XLA_PYTHON_CLIENT_MEM_FRACTION:-0.9}"
[[ "$INSTALL" == 1 ]] && bash "$HERE/host_install.sh"
DETACH="${DETACH:-0}" exec bash "$HERE/host_train.sh" -- "${REST_ARGS[@]}"
