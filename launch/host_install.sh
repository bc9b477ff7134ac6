#!/usr/bin/env bash
# Runs ON a host, from the repository root: a Python >= 3.11 virtual environment in .venv with
# tgjax installed editable and the JAX build for the accelerator.
#
#   ACCEL=tpu    launch/host_install.sh    # Cloud TPU VM:  pip install -e . "jax[tpu]"
#   ACCEL=cuda12 launch/host_install.sh    # NVIDIA GPU:    pip install -e . "jax[cuda12]"  (or cuda13)
#   ACCEL=cpu    launch/host_install.sh    # plain jax
#   EXTRA_PIP="..." launch/host_install.sh      # more packages in the same install
#   GCS=0 launch/host_install.sh                # without the Cloud Storage clients (gcsfs, google-cloud-storage)
#                                               # that a gs:// WORKDIR is written with; default 1
#   GCSFUSE=1 launch/host_install.sh            # also gcsfuse (apt), which only evaluation uses: host_eval.sh
#                                               # mounts a gs:// WORKDIR (training does not); default 1 with ACCEL=tpu
#
# The TPU runtime images (tpu-ubuntu2204-base, v2-alpha-*) ship Python 3.10; when no python3.11+ is
# on PATH, this installs uv (pip --user) and lets it fetch a Python 3.11 for the venv.
set -euo pipefail
HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
# shellcheck source=common.sh
source "$HERE/common.sh"
parse_common_args "$@"

: "${ACCEL:=tpu}"
: "${VENV:=.venv}"
: "${EXTRA_PIP:=}"
: "${PYTHON_VERSION:=3.11}"
: "${GCS:=1}"
if [[ "$ACCEL" == tpu ]]; then : "${GCSFUSE:=1}"; else : "${GCSFUSE:=0}"; fi
cd "$HERE/.."

case "$ACCEL" in
  tpu) jax_req='jax[tpu]' ;;              # libtpu comes from PyPI with the extra (JAX install docs)
  cuda12|cuda13) jax_req="jax[$ACCEL]" ;;  # CUDA and cuDNN wheels from PyPI; needs only the NVIDIA driver
  cpu) jax_req='jax' ;;
  *) echo "ACCEL: expected tpu, cuda12, cuda13 or cpu, got '$ACCEL'" >&2; exit 2 ;;
esac
# A gs:// WORKDIR is written directly: etils.epath reaches the bucket through gcsfs (or tf.io.gfile where
# TensorFlow is installed), and orbax lists a bucket's checkpoints with google-cloud-storage.
gcs_reqs=()
[[ "$GCS" == 1 ]] && gcs_reqs=(gcsfs google-cloud-storage)

python_ok() { "$1" -c 'import sys; sys.exit(sys.version_info < (3, 11))' 2>/dev/null; }
PY=""
for cand in "${PYTHON:-}" python3.13 python3.12 python3.11 python3; do
  if [[ -n "$cand" ]] && command -v "$cand" >/dev/null && python_ok "$cand"; then PY="$cand"; break; fi
done

if [[ -n "$PY" ]]; then
  [[ -x "$VENV/bin/python" ]] || run "$PY" -m venv "$VENV"
  run "$VENV/bin/python" -m pip install -q -U pip
  # shellcheck disable=SC2086
  run "$VENV/bin/python" -m pip install -q -U -e . "$jax_req" "${gcs_reqs[@]}" $EXTRA_PIP
else
  export PATH="$HOME/.local/bin:$PATH"
  if ! command -v uv >/dev/null; then
    if python3 -m pip --version >/dev/null 2>&1; then
      run python3 -m pip install -q --user -U uv
    else
      run sh -c 'curl -LsSf https://astral.sh/uv/install.sh | sh'   # uv's own installer, into ~/.local/bin
    fi
  fi
  [[ -x "$VENV/bin/python" ]] || run uv venv --python "$PYTHON_VERSION" "$VENV"
  # shellcheck disable=SC2086
  run uv pip install -q --python "$VENV/bin/python" -U -e . "$jax_req" "${gcs_reqs[@]}" $EXTRA_PIP
fi
# gcsfuse from Google's apt repository (its install guide), for evaluation: host_eval.sh mounts a gs://
# WORKDIR, as `tgjax eval` reads a model back from local paths (training writes the bucket directly).
if [[ "$GCSFUSE" == 1 ]] && { [[ "$DRY_RUN" == 1 ]] || ! command -v gcsfuse >/dev/null; }; then
  codename=$(lsb_release -cs 2>/dev/null || echo jammy)
  run sudo sh -c 'curl -fsSL https://packages.cloud.google.com/apt/doc/apt-key.gpg > /usr/share/keyrings/cloud.google.asc'
  run sudo sh -c "echo 'deb [signed-by=/usr/share/keyrings/cloud.google.asc] https://packages.cloud.google.com/apt gcsfuse-$codename main' > /etc/apt/sources.list.d/gcsfuse.list"
  run sudo apt-get update -q
  run sudo apt-get install -y -q gcsfuse
fi
# Versions only: touching the TPU here would start its runtime on one host of a slice alone
# (launch/tpu_setup.sh checks the devices afterwards on every host at once).
[[ "$DRY_RUN" == 1 ]] || "$VENV/bin/python" -c \
  'import importlib.metadata as m; print(*(f"{p} {m.version(p)}" for p in ("tgjax", "jax", "jaxlib", "flax")), sep=", ")'
