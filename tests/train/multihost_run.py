"""One host of a two-process run on CPU: `jax.distributed.initialize` over localhost, two local devices each.

    XLA_FLAGS=--xla_force_host_platform_device_count=2 \
        python -m tests.train.multihost_run WORKDIR [STOP_AFTER_STEP] PORT PROCESS_ID

Trains (or resumes training) the test-sized model, with one layer, up to step 5
on a data 2 x model 2 mesh spread over both processes, stopping after STOP_AFTER_STEP when
given (with a checkpoint, as a preemption would); each process reads its own
half of every batch (the pipeline's host sharding) and `global_batch`
assembles the global arrays. Each process prints one JSON line a run (process
0's last one is the last line of its output): {"process": i, "start_step": s, "final_step": f,
"stop_reason": r, "losses": {step: loss}, "params_sha256": h (of the whole
parameters after the last step, or null if the run stopped before it),
"processes": 2, "devices": 4}.

Environment variables for the preemption tests (tests/train/test_preemption.py):
MULTIHOST_NUM_STEPS (default 5), MULTIHOST_PREEMPTION_CHECK_STEPS
(checkpointing.preemption_check_steps, default 1), and MULTIHOST_RUNS="SUBDIR:A,B;SUBDIR:A,B:S;...":
the runs to do one after another in these processes (one line each, in order),
each in WORKDIR/SUBDIR, with process 0 sending itself SIGTERM after step A and
process 1 after step B (an empty entry: never), stopping after step S when
given (else after STOP_AFTER_STEP, if given). Several runs in one pair of
processes start Python and JAX once. Default: one run in WORKDIR, no signal.
"""

import hashlib
import json
import os
import signal
import sys
import time
from pathlib import Path

import jax
import numpy as np
from jax.experimental import multihost_utils

from tests.train.helpers import small_config
from tgjax.train.loop import train


def params_sha256(params) -> str:
    """sha256 of every parameter's whole (gathered from both processes) bytes, in tree order."""
    whole = multihost_utils.process_allgather(params, tiled=True)
    digest = hashlib.sha256()
    for leaf in jax.tree.leaves(whole):
        digest.update(np.ascontiguousarray(leaf).tobytes())
    return digest.hexdigest()


def run_once(config, workdir: Path, sigterm_after: str, stop_after_step: str | None) -> dict:
    num_steps = config.training.num_steps
    final = {"params_sha256": None}

    def hooks(step, state, metrics):
        if sigterm_after and step >= int(sigterm_after):
            if step == int(sigterm_after):
                os.kill(os.getpid(), signal.SIGTERM)  # what a preemption notice sends, to this host only
            # JAX's preemption service hears a notice within about a second: slow down so that it comes
            # before the last step (the stop must be agreed however late it comes).
            time.sleep(0.2)
        if step == num_steps:
            final["params_sha256"] = params_sha256(state.params)  # both processes: a collective

    result = train(config, workdir, quiet=True, callback=hooks,
                   stop_after_step=int(stop_after_step) if stop_after_step else None)
    return {"process": jax.process_index(), "start_step": result.start_step, "final_step": result.final_step,
            "stop_reason": result.stop_reason, "losses": result.losses, **final,
            "processes": jax.process_count(), "devices": jax.device_count()}


def main(workdir: str, stop_after_step: str | None, port: str, process_id: str) -> None:
    num_steps = int(os.environ.get("MULTIHOST_NUM_STEPS", "5"))
    check_every = int(os.environ.get("MULTIHOST_PREEMPTION_CHECK_STEPS", "1"))
    config = small_config(
        "model.num_layers=1", f"training.num_steps={num_steps}", "mesh.data=2", "mesh.model=2",
        "evaluation.interval_steps=0", "data.valid_path=", f"checkpointing.interval_steps={num_steps}",
        f"checkpointing.preemption_check_steps={check_every}",
        "distributed.initialize=true", f"distributed.coordinator_address=localhost:{port}",
        "distributed.num_processes=2", f"distributed.process_id={process_id}",
    )
    for spec in os.environ.get("MULTIHOST_RUNS", ".:").split(";"):
        subdir, signals, *stop = spec.split(":")
        sigterm_after = (signals or ",").split(",")[int(process_id)]
        stop_after = stop[0] if stop and stop[0] else stop_after_step
        print(json.dumps(run_once(config, Path(workdir) / subdir, sigterm_after, stop_after)), flush=True)


if __name__ == "__main__":
    workdir, *stop_after, port, process_id = sys.argv[1:]
    main(workdir, stop_after[0] if stop_after else None, port, process_id)
