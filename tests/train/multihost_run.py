"""One host of a two-process run on CPU: `jax.distributed.initialize` over localhost, two local devices each.

    XLA_FLAGS=--xla_force_host_platform_device_count=2 \
        python -m tests.train.multihost_run WORKDIR PORT PROCESS_ID [--resume-check]

Trains the test-sized model for 5 steps on a data 2 x model 2 mesh spread over
both processes; each process reads its own half of every batch (the
pipeline's host sharding) and `global_batch` assembles the global arrays.
Process 0 prints one JSON line: {"losses": [...], "processes": 2, "devices": 4}.
"""

import json
import sys
from pathlib import Path

import jax

from tests.train.helpers import small_config
from tgjax.train.loop import train


def main(workdir: str, port: str, process_id: str) -> None:
    config = small_config(
        "training.num_steps=5", "mesh.data=2", "mesh.model=2", "evaluation.interval_steps=0", "data.valid_path=",
        "checkpointing.interval_steps=5",
        "distributed.initialize=true", f"distributed.coordinator_address=localhost:{port}",
        "distributed.num_processes=2", f"distributed.process_id={process_id}",
    )
    result = train(config, Path(workdir), quiet=True)
    if jax.process_index() == 0:
        losses = [result.losses[s] for s in sorted(result.losses)]
        print(json.dumps({"losses": losses, "processes": jax.process_count(), "devices": jax.device_count()}))


if __name__ == "__main__":
    main(*sys.argv[1:4])
