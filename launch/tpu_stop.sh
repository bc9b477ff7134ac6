#!/usr/bin/env bash
# Stops the training run on every host (by the pid file launch/host_train.sh wrote; the whole
# process group of that run, nothing else). The VM keeps running: launch/tpu_delete.sh removes it.
# The hosts get SIGTERM one by one, at different steps; the trainer's hosts agree on one step after
# which all of them save and stop (tgjax/train/loop.py, `_Preemption`), as for a preemption notice.
#
#   launch/tpu_stop.sh            launch/tpu_stop.sh --dry-run
set -euo pipefail
HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
# shellcheck source=common.sh
source "$HERE/common.sh"
parse_common_args "$@"
name="train-${CONFIG##*/}"; name="${name%.py}"
pidfile="${LOG_DIR:-\$HOME/tgjax_logs}/$name.pid"
on_all_workers "if [ -f $pidfile ] && kill -0 \$(cat $pidfile) 2>/dev/null; then kill -TERM -- -\$(cat $pidfile) && echo \$(hostname): stopped $name; else echo \$(hostname): $name not running; fi"
