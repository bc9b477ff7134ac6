#!/usr/bin/env bash
# Shows the training log of a host (WORKER=0 by default; WORKER=all for every host), following it
# with FOLLOW=1 (Ctrl-C stops watching, not training). LINES=N sets how much to show.
#
#   launch/tpu_logs.sh          FOLLOW=1 launch/tpu_logs.sh          WORKER=all LINES=5 launch/tpu_logs.sh
set -euo pipefail
HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
# shellcheck source=common.sh
source "$HERE/common.sh"
parse_common_args "$@"
: "${WORKER:=0}" "${FOLLOW:=0}" "${LINES:=50}"
name="train-${CONFIG##*/}"; name="${name%.py}"
log="${LOG_DIR:-\$HOME/tgjax_logs}/$name.log"
follow=""; [[ "$FOLLOW" == 1 ]] && follow=" -F"
on_all_workers "tail -n $((LINES))$follow $log"
