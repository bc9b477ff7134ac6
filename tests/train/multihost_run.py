"""One host of a two-process run on CPU: `jax.distributed.initialize` over localhost, two local devices each.

    XLA_FLAGS=--xla_force_host_platform_device_count=2 \
        python -m tests.train.multihost_run WORKDIR [STOP_AFTER_STEP] PORT PROCESS_ID

Trains (or resumes training) the test-sized model up to step 5 on a data 2 x
model 2 mesh spread over both processes, stopping after STOP_AFTER_STEP when
given (with a checkpoint, as a preemption would); each process reads its own
half of every batch (the pipeline's host sharding) and `global_batch`
assembles the global arrays. Process 0 prints one JSON line:
{"start_step": s, "losses": {step: loss}, "processes": 2, "devices": 4}.
"""

import json
import sys
from pathlib import Path

import jax

from tests.train.helpers import small_config
from tgjax.train.loop import train


def main(workdir: str, stop_after_step: str | None, port: str, process_id: str) -> None:
    config = small_config(
        "training.num_steps=5", "mesh.data=2", "mesh.model=2", "evaluation.interval_steps=0", "data.valid_path=",
        "checkpointing.interval_steps=5",
        "distributed.initialize=true", f"distributed.coordinator_address=localhost:{port}",
        "distributed.num_processes=2", f"distributed.process_id={process_id}",
    )
    result = train(config, Path(workdir), quiet=True,
                   stop_after_step=int(stop_after_step) if stop_after_step else None)
    if jax.process_index() == 0:
        print(json.dumps({"start_step": result.start_step, "losses": result.losses,
                          "processes": jax.process_count(), "devices": jax.device_count()}))


if __name__ == "__main__":
    workdir, *stop_after, port, process_id = sys.argv[1:]
    main(workdir, stop_after[0] if stop_after else None, port, process_id)
