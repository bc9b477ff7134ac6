#!/usr/bin/env bash
# Puts the code on every host of the TPU VM and installs it: a Python 3.11 venv in ~/$REMOTE_DIR/.venv
# with `pip install -e .` and `jax[tpu]` (launch/host_install.sh), then checks that JAX sees every chip.
#
#   REPO_URL=https://github.com/you/tgjax.git BRANCH=main launch/tpu_setup.sh   # git clone / pull on each host
#   COPY_LOCAL=1 launch/tpu_setup.sh       # copy this working tree instead (uncommitted changes included)
#   CHECK=0 launch/tpu_setup.sh            # skip the device check
#   launch/tpu_setup.sh --dry-run
set -euo pipefail
HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
# shellcheck source=common.sh
source "$HERE/common.sh"
parse_common_args "$@"

: "${COPY_LOCAL:=0}"
: "${CHECK:=1}"
: "${EXTRA_PIP:=}"
dir=$(quote "$REMOTE_DIR")

if [[ "$COPY_LOCAL" == 1 ]]; then
  tarball="${TMPDIR:-/tmp}/tgjax-src.tgz"
  run tar -czf "$tarball" -C "$HERE/.." --exclude=./.git --exclude=./.venv --exclude='*.egg-info' \
    --exclude=__pycache__ --exclude=./runs --exclude=.pytest_cache .
  run gcloud compute tpus tpu-vm scp "$tarball" "$TPU_NAME:tgjax-src.tgz" "${TPU_FLAGS[@]}" --worker=all
  fetch="mkdir -p $dir && tar -xzf ~/tgjax-src.tgz -C $dir"
else
  require_real REPO_URL
  url=$(quote "$REPO_URL"); branch=$(quote "${BRANCH}")
  fetch="if [ -d $dir/.git ]; then git -C $dir pull --ff-only origin $branch; else git clone --branch $branch $url $dir; fi"
fi
on_all_workers "set -euo pipefail; $fetch; cd $dir && $(env_exports EXTRA_PIP)ACCEL=tpu bash launch/host_install.sh"

if [[ "$CHECK" == 1 ]]; then
  # Every host at once, as a multi-host JAX program must start; prints global and local device counts.
  on_all_workers "cd $dir && .venv/bin/python -c 'import jax; jax.distributed.initialize(); print(jax.process_index(), \"of\", jax.process_count(), \"hosts:\", jax.local_device_count(), \"local /\", jax.device_count(), \"devices\", jax.devices()[0].device_kind)'"
fi
