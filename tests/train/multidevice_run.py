"""Run in a subprocess with XLA_FLAGS=--xla_force_host_platform_device_count=8 (set before JAX starts).

    python -m tests.train.multidevice_run WORKDIR LAYOUT [LAYOUT ...]     LAYOUT = DATAxMODEL, e.g. 4x2

Trains the test-sized model for 5 steps on the first data*model devices for
each layout, and prints one JSON line: {layout: {"losses": [...], "specs": {...}}},
with the partition specs the parameters actually got.
"""

import json
import sys
from pathlib import Path

import jax

from tests.train.helpers import small_config
from tgjax.train.loop import train


def main(workdir: str, layouts: list[str]) -> None:
    out = {}
    for layout in layouts:
        data, model = (int(x) for x in layout.split("x"))
        config = small_config("training.num_steps=5", f"mesh.data={data}", f"mesh.model={model}",
                              "evaluation.interval_steps=0", "data.valid_path=", "checkpointing.interval_steps=100")
        specs = {}
        result = train(config, Path(workdir) / layout, devices=jax.devices()[: data * model], quiet=True,
                       callback=lambda step, state, metrics: specs.update(
                           w_in=repr(state.params["layers"][0]["feed_forward"]["w_in"].sharding.spec),
                           query=repr(state.params["layers"][0]["attention"]["query"].sharding.spec),
                           memory=repr(state.memory.sharding.spec)))
        out[layout] = {"losses": [result.losses[s] for s in sorted(result.losses)], "specs": specs,
                       "devices": len(jax.devices())}
    print(json.dumps(out))


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2:])
