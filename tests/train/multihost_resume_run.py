"""One host of a two-process resume in which the hosts see the checkpoints differently (CPU, localhost).

    XLA_FLAGS=--xla_force_host_platform_device_count=2 \
        python -m tests.train.multihost_resume_run WORKDIR PORT PROCESS_ID

Two runs in WORKDIR, in the same pair of processes: the first trains the
test-sized model to step 4 (checkpoints at 2 and 4) on a data 2 x model 2
mesh over both processes; for the second (to step 6), process 1's integrity
check says that step 4 is corrupt, as a host whose view of a bucket lags
(a listing or metadata cache) could. Were each host to choose its own step,
process 1 would resume from step 2 (or set step 4 aside) while process 0
resumes from step 4, and the collective restore would hang or mix steps.
Each process prints one JSON line a run: {"process": i, "start_step": s,
"final_step": f, "problems": [steps set aside], "distrusts": whether this
process was made to distrust step 4}.
"""

import json
import sys
from pathlib import Path

import jax

from tests.train.helpers import small_config
from tgjax.train import checkpoint
from tgjax.train.loop import train


def main(workdir: str, port: str, process_id: str) -> None:
    def config(num_steps: int):
        return small_config(
            f"training.num_steps={num_steps}", "mesh.data=2", "mesh.model=2", "evaluation.interval_steps=0",
            "data.valid_path=", "checkpointing.interval_steps=2", "distributed.initialize=true",
            f"distributed.coordinator_address=localhost:{port}", "distributed.num_processes=2",
            f"distributed.process_id={process_id}")

    def report(result, distrusts: bool) -> None:
        print(json.dumps({"process": jax.process_index(), "start_step": result.start_step,
                          "final_step": result.final_step, "distrusts": distrusts,
                          "problems": [p.step for p in result.checkpoint_problems]}), flush=True)

    report(train(config(4), Path(workdir), quiet=True), False)
    distrusts = jax.process_index() == 1
    if distrusts:
        trusted = checkpoint.check_step
        checkpoint.check_step = lambda workdir, step, **kw: (  # type: ignore[assignment]
            "this host's view of step 4 lags" if step == 4 else trusted(workdir, step, **kw))
    report(train(config(6), Path(workdir), quiet=True), distrusts)


if __name__ == "__main__":
    main(*sys.argv[1:])
