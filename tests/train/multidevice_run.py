"""Run in a subprocess with XLA_FLAGS=--xla_force_host_platform_device_count=8 (set before JAX starts).

    python -m tests.train.multidevice_run WORKDIR LAYOUT [LAYOUT ...]     LAYOUT = DATAxMODEL[:scan|:fsdp], e.g. 4x2

Trains the test-sized model (with one layer; two for ":scan") for 5 steps on
the first data*model devices for each layout, and prints one JSON line: {layout: {"losses": [...], "specs": {...},
"device_bytes": n}}, with the partition specs the parameters actually got (and of
the first Adam moment of `w_in`), and the most bytes of parameters and optimiser
state any one device holds (from the arrays' shards). ":scan" trains with
model.scan_layers and model.remat on: the layers' parameters are then stacked
`[K, ...]`. ":fsdp" trains with mesh.fsdp on.
"""

import json
import sys
from pathlib import Path

import jax

from tests.train.helpers import small_config
from tgjax.train.loop import train


def device_bytes(tree) -> int:
    """The most bytes of `tree`'s arrays that any one device holds."""
    per_device: dict = {}
    for leaf in jax.tree.leaves(tree):
        for shard in leaf.addressable_shards:
            per_device[shard.device] = per_device.get(shard.device, 0) + shard.data.nbytes
    return max(per_device.values())


def main(workdir: str, layouts: list[str]) -> None:
    out = {}
    for layout in layouts:
        sizes, _, variant = layout.partition(":")
        data, model = (int(x) for x in sizes.split("x"))
        knobs = {"scan": ["model.num_layers=2", "model.scan_layers=true", "model.remat=true"],
                 "fsdp": ["mesh.fsdp=true"]}.get(variant, [])
        config = small_config("model.num_layers=1", "training.num_steps=5", f"mesh.data={data}", f"mesh.model={model}",
                              "evaluation.interval_steps=0", "data.valid_path=", "checkpointing.interval_steps=100",
                              *knobs)
        specs = {}

        def record(step, state, metrics):
            layers = state.params["layers"] if variant == "scan" else state.params["layers"][0]
            adam_mu = state.opt_state[1][0].mu["layers"]  # chain(clip, adam): adam's ScaleByAdamState
            adam_mu = adam_mu if variant == "scan" else adam_mu[0]
            specs.update(w_in=repr(layers["feed_forward"]["w_in"].sharding.spec),
                         query=repr(layers["attention"]["query"].sharding.spec),
                         w_in_mu=repr(adam_mu["feed_forward"]["w_in"].sharding.spec),
                         memory=repr(state.carry.sharding.spec))
            specs["device_bytes"] = device_bytes((state.params, state.opt_state))

        result = train(config, Path(workdir) / layout.replace(":", "_"), devices=jax.devices()[: data * model],
                       quiet=True, callback=record)
        out[layout] = {"losses": [result.losses[s] for s in sorted(result.losses)], "specs": specs,
                       "device_bytes": specs.pop("device_bytes"), "devices": len(jax.devices())}
    print(json.dumps(out))


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2:])
