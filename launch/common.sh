# shellcheck shell=bash
# Shared settings and helpers for the launch scripts; sourced, not run.
#
# Every setting is an environment variable with a default; every script takes
# --dry-run (or DRY_RUN=1), which prints the commands it would run, one per
# line, shell-quoted, and runs nothing.

# --- settings (override in the environment) ---------------------------------
: "${PROJECT:=}"                               # empty: gcloud's configured project
: "${ZONE:=us-central2-b}"                    # v4 lives in us-central2-b
: "${TPU_NAME:=tgjax-tpu}"
: "${ACCELERATOR_TYPE:=v4-32}"                # v4-8 = one host; v4-32 = 4 hosts
: "${RUNTIME_VERSION:=tpu-ubuntu2204-base}"   # v4; v5e: v2-alpha-tpuv5-lite; v5p: v2-alpha-tpuv5; v6e: v2-alpha-tpuv6e
: "${REPO_URL:=https://github.com/OWNER/tgjax.git}"
: "${BRANCH:=main}"
: "${REMOTE_DIR:=tgjax}"                      # checkout on each host, relative to $HOME
: "${CONFIG:=tg_bllip}"                       # a name in configs/ or a path to a config file
: "${WORKDIR:=gs://YOUR_BUCKET/tgjax/${CONFIG##*/}}"  # checkpoints + TensorBoard events; gs:// or a local dir
: "${DRY_RUN:=0}"

TPU_FLAGS=(--zone="$ZONE")
[[ -n "$PROJECT" ]] && TPU_FLAGS+=(--project="$PROJECT")

# --- helpers ------------------------------------------------------------------

# usage: the running script's help, its leading comment block (below the #! line).
usage() {
  awk 'NR > 1 && /^#/ { sub(/^# ?/, ""); print; next } NR > 1 { exit }' "${BASH_SOURCE[-1]}"
}

# parse_common_args "$@": consumes --dry-run and -h/--help; leaves the rest in REST_ARGS.
parse_common_args() {
  REST_ARGS=()
  while (($#)); do
    case "$1" in
      --dry-run) DRY_RUN=1 ;;
      -h|--help) usage; exit 0 ;;
      --) shift; REST_ARGS+=("$@"); break ;;
      *) REST_ARGS+=("$1") ;;
    esac
    shift
  done
}

# run CMD ARGS...: runs a command, or prints it (shell-quoted) under --dry-run.
run() {
  if [[ "$DRY_RUN" == 1 ]]; then
    quote "$@"
    echo
  else
    echo "+ $*" >&2
    "$@"
  fi
}

# quote ARGS...: one shell-quoted string (bare words stay bare; the rest in single quotes,
# after the `--flag=` of a flag), for commands shown under --dry-run and those run on the hosts.
quote() {
  local a out=() q="'\\''"
  for a in "$@"; do
    if [[ "$a" =~ ^[A-Za-z0-9_./:=,@%+-]+$ ]]; then
      out+=("$a")
    elif [[ "$a" =~ ^(--[A-Za-z0-9_.-]+=)(.*)$ ]]; then
      out+=("${BASH_REMATCH[1]}'${BASH_REMATCH[2]//\'/$q}'")
    else
      out+=("'${a//\'/$q}'")
    fi
  done
  printf '%s' "${out[*]}"
}

# config_path NAME_OR_PATH: configs/NAME.py for a bare name, else the path as given.
config_path() {
  case "$1" in
    */*|*.py) echo "$1" ;;
    *) echo "configs/$1.py" ;;
  esac
}

# on_all_workers COMMAND: runs a shell command on every host of the TPU VM, in parallel.
on_all_workers() {
  run gcloud compute tpus tpu-vm ssh "$TPU_NAME" "${TPU_FLAGS[@]}" --worker="${WORKER:-all}" \
    ${SSH_OUTPUT_DIR:+--output-directory="$SSH_OUTPUT_DIR"} --command="$1"
}

# env_exports NAME...: `export NAME=value; ...` for the variables that are set, to pass to the hosts.
env_exports() {
  local name exports=""
  for name in "$@"; do
    if [[ -n "${!name:-}" ]]; then
      exports+="export $name=$(quote "${!name}"); "
    fi
  done
  printf '%s' "$exports"
}

require_real() {
  # Refuses the placeholder defaults outside --dry-run.
  local name
  [[ "$DRY_RUN" == 1 ]] && return 0
  for name in "$@"; do
    if [[ "${!name}" == *OWNER/* || "${!name}" == *YOUR_BUCKET* || -z "${!name}" ]]; then
      echo "error: set $name (now '${!name}'); see launch/README.md" >&2
      exit 2
    fi
  done
}

# --- buckets on the hosts, for evaluation ---------------------------------------------
# `tgjax train` writes a gs:// WORKDIR directly and `tgjax eval` reads one directly (orbax and
# etils.epath; neither script mounts it). `tgjax eval` writes its outputs with local file operations,
# so host_eval.sh puts a gs:// OUTPUT_DIR through a gcsfuse mount of its bucket at $GCS_MOUNT/BUCKET
# (default ~/gcs on the host), shared by every host of a slice.

# local_path URI: gs://BUCKET/PATH -> GCS_MOUNT/BUCKET/PATH; anything else unchanged.
local_path() {
  if [[ "$1" == gs://* ]]; then
    echo "${GCS_MOUNT:-$HOME/gcs}/${1#gs://}"
  else
    echo "$1"
  fi
}

# mount_bucket_of URI: for gs://BUCKET/..., mounts BUCKET at GCS_MOUNT/BUCKET with gcsfuse unless it is.
_MOUNTED=" "
mount_bucket_of() {
  [[ "$1" == gs://* ]] || return 0
  local bucket="${1#gs://}"; bucket="${bucket%%/*}"
  local dir="${GCS_MOUNT:-$HOME/gcs}/$bucket"
  if [[ "$_MOUNTED" == *" $bucket "* ]] || { [[ "$DRY_RUN" != 1 ]] && mountpoint -q "$dir" 2>/dev/null; }; then
    return 0
  fi
  _MOUNTED+="$bucket "
  if [[ "$DRY_RUN" != 1 ]] && ! command -v gcsfuse >/dev/null; then
    echo "error: WORKDIR $1 needs gcsfuse on this host (GCSFUSE=1 launch/host_install.sh installs it)" >&2
    exit 2
  fi
  run mkdir -p "$dir"
  run gcsfuse --implicit-dirs "$bucket" "$dir"
}
