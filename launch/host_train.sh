#!/usr/bin/env bash
# Runs ON a host, from the repository root: stages the data and starts `tgjax train`.
# launch/tpu_train.sh runs it on every host of a TPU slice at once; launch/gpu_train.sh on one GPU host.
#
#   CONFIG=tg_bllip WORKDIR=gs://bucket/tgjax/tg_bllip \
#   DATA_URI=gs://bucket/bllip TRAIN_FILE=train.txt VALID_FILE=valid.txt \
#     launch/host_train.sh [--config.x.y=v ...]
#
# Settings: CONFIG, WORKDIR; DATA_URI (gs://... is copied to DATA_DIR on this host; a local directory is
# used in place); TRAIN_FILE / VALID_FILE (names inside it, passed as
# --config.data.{train,valid}_path=...); DETACH=1 (default) runs in the background under nohup with
# a log and a pid file in LOG_DIR, so the ssh session may end; DETACH=0 runs in the foreground.
# A run already going on this host is left alone. RESTART=1 stops it first: SIGTERM, then waits up to
# STOP_TIMEOUT seconds (default 600) for it to exit, as it saves its agreed checkpoint meanwhile; a run that
# has not exited by then is an error (nothing new is started). Re-running resumes:
# the trainer restores the latest checkpoint in WORKDIR. A gs:// WORKDIR is given to the trainer as it is
# (no gcsfuse mount): orbax writes the checkpoints to the bucket and the run's other files go through
# etils.epath, with the Cloud Storage clients that launch/host_install.sh installs (gcsfs,
# google-cloud-storage). DISTRIBUTED=1 (set by launch/tpu_train.sh) adds
# --config.distributed.initialize=true: every host joins one JAX program.
set -euo pipefail
HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
# shellcheck source=common.sh
source "$HERE/common.sh"
parse_common_args "$@"
cd "$HERE/.."

: "${VENV:=.venv}"
: "${DATA_URI:=}"
: "${DATA_DIR:=$HOME/tgjax_data}"
: "${TRAIN_FILE:=}" "${VALID_FILE:=}"
: "${DETACH:=1}"
: "${RESTART:=0}"
: "${STOP_TIMEOUT:=600}"
: "${LOG_DIR:=$HOME/tgjax_logs}"
: "${DISTRIBUTED:=0}"
RUN_NAME="train-${CONFIG##*/}"; RUN_NAME="${RUN_NAME%.py}"
LOG="$LOG_DIR/$RUN_NAME.log"
PIDFILE="$LOG_DIR/$RUN_NAME.pid"
require_real WORKDIR

# Data: a gs:// prefix is copied here (every host gets its own copy; the pipeline reads local files).
if [[ "$DATA_URI" == gs://* ]]; then
  run mkdir -p "$DATA_DIR"
  run gcloud storage rsync --recursive "$DATA_URI" "$DATA_DIR"
elif [[ -n "$DATA_URI" ]]; then
  DATA_DIR="$DATA_URI"
fi
overrides=()
[[ -n "$TRAIN_FILE" ]] && overrides+=("--config.data.train_path=$DATA_DIR/$TRAIN_FILE")
[[ -n "$VALID_FILE" ]] && overrides+=("--config.data.valid_path=$DATA_DIR/$VALID_FILE")

[[ "$DISTRIBUTED" == 1 ]] && overrides+=("--config.distributed.initialize=true")
# A gs:// WORKDIR is written directly; without the Cloud Storage clients the run would stop at its first file.
# (etils.epath takes tf.io.gfile instead of gcsfs where TensorFlow is installed.)
gcs_clients='import importlib.util as u, sys; sys.exit(not (u.find_spec("google.cloud.storage")
  and (u.find_spec("gcsfs") or u.find_spec("tensorflow"))))'
if [[ "$WORKDIR" == gs://* && "$DRY_RUN" != 1 ]] && ! "$VENV/bin/python" -c "$gcs_clients" 2>/dev/null; then
  echo "error: WORKDIR $WORKDIR needs gcsfs and google-cloud-storage in $VENV (GCS=1 launch/host_install.sh" \
       "installs them)" >&2
  exit 2
fi

cmd=("$VENV/bin/tgjax" train --config "$(config_path "$CONFIG")" --workdir "$WORKDIR"
     "${overrides[@]}" "${REST_ARGS[@]}")

# wait_for_exit PGID SECONDS: waits until no process of the group PGID is left (the run and its children:
# a restart must not start while the old run still writes its checkpoint), saying so every 30 s; 1 if
# some are still there after SECONDS.
wait_for_exit() {
  local group=$1 limit=$2 waited=0
  if [[ "$DRY_RUN" == 1 ]]; then
    echo "# wait up to $limit s for process group $group to exit"
    return 0
  fi
  while kill -0 -- "-$group" 2>/dev/null; do
    if (( waited >= limit )); then
      return 1
    fi
    if (( waited % 30 == 0 )); then
      echo "$(hostname): waiting for $RUN_NAME (pid $group) to save its checkpoint and exit" \
           "(${waited} s of at most ${limit} s)"
    fi
    sleep 1
    waited=$((waited + 1))
  done
  echo "$(hostname): $RUN_NAME (pid $group) has exited after ${waited} s"
}

if [[ "$DETACH" != 1 ]]; then
  run "${cmd[@]}"
  exit
fi
run mkdir -p "$LOG_DIR"
if [[ -f "$PIDFILE" ]] && kill -0 "$(cat "$PIDFILE")" 2>/dev/null; then
  if [[ "$RESTART" == 1 ]]; then
    old_pid=$(cat "$PIDFILE")
    run kill -TERM -- "-$old_pid"   # the run's own process group (setsid below)
    wait_for_exit "$old_pid" "$STOP_TIMEOUT" || {
      echo "$(hostname): error: $RUN_NAME (pid $old_pid) has not exited ${STOP_TIMEOUT} s after SIGTERM; not" \
           "starting a new run beside it. See $LOG; stop it (kill -KILL -- -$old_pid) or raise STOP_TIMEOUT" >&2
      exit 1
    }
  else
    echo "$(hostname): $RUN_NAME is already running (pid $(cat "$PIDFILE"), log $LOG); RESTART=1 to restart" >&2
    exit 0
  fi
fi
# The run leads its own process group (setsid) and writes its pid itself, so that
# launch/tpu_stop.sh can signal exactly this run and its children.
# shellcheck disable=SC2016  # $$ and $@ are for the inner bash
launcher=(nohup setsid bash -c 'echo $$ >"$0"; exec "$@"' "$PIDFILE" "${cmd[@]}")
if [[ "$DRY_RUN" == 1 ]]; then
  echo "$(quote "${launcher[@]}") >>$(quote "$LOG") 2>&1 </dev/null &"
  exit 0
fi
rm -f "$PIDFILE"
echo "=== $(date -u +%FT%TZ) $(hostname): $(quote "${cmd[@]}")" >>"$LOG"
"${launcher[@]}" >>"$LOG" 2>&1 </dev/null &
for _ in $(seq 50); do [[ -s "$PIDFILE" ]] && break; sleep 0.1; done
echo "$(hostname): started $RUN_NAME, pid $(cat "$PIDFILE" 2>/dev/null || echo '?'), log $LOG"
