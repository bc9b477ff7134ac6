"""How long `CheckpointStore.save` holds up training: the store at BASELINE_COMMIT against the store now.

The baseline is the store as it was at commit BASELINE_COMMIT (read with
`git show`): at every save, process 0 re-read and sha256-hashed the whole
previous checkpoint on the training thread. Now a manifest of file sizes is
written by a background thread, and hashing is opt-in (`checkpointing.checksums`)
and on that thread too.

The state is a TG-252M-sized ParamsState: parameters (tg_bllip: 251,887,616
float32) plus Adam's two moments, about 3 GB, split into 32 arrays. `--scale`
shrinks it (default 1/8, which fits a shared 2-core machine); the old
stall (hashing) grows linearly with the bytes, the new one is mostly fixed
overhead, so dividing by the scale (printed) overstates the new one.

Steady state, as in training: step 1 is saved and its asynchronous write
finishes while "training" goes on; the stall is the wall time of the call
`save(2)`, which in the baseline includes hashing step 1.

    .venv/bin/python benchmarks/checkpoint_stall.py [--scale 0.125] [--repeats 2]
"""

from __future__ import annotations

import argparse
import importlib.util
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import jax
import jax.numpy as jnp

from tgjax.train.checkpoint import CheckpointStore
from tgjax.train.params_state import ParamsState

REPO = Path(__file__).resolve().parents[1]
BASELINE_COMMIT = "345b736"  # the last commit with the synchronous sha256 manifest
TG_252M_PARAMETERS = 251_887_616  # `tgjax info --config configs/tg_bllip.py`
NUM_ARRAYS = 32


def baseline_store_class():
    """CheckpointStore as of BASELINE_COMMIT (its imports from tgjax.workdir still exist, with the same meaning)."""
    source = subprocess.run(["git", "show", f"{BASELINE_COMMIT}:tgjax/train/checkpoint.py"], cwd=REPO, check=True,
                            capture_output=True, text=True).stdout
    path = Path(tempfile.mkdtemp()) / "baseline_checkpoint.py"
    path.write_text(source)
    spec = importlib.util.spec_from_file_location("baseline_checkpoint", path)
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # its dataclasses look their module up
    spec.loader.exec_module(module)
    return module.CheckpointStore


def make_state(num_parameters: int) -> ParamsState:
    per_array = num_parameters // NUM_ARRAYS
    keys = jax.random.split(jax.random.key(0), 3 * NUM_ARRAYS)
    # Random values: zeros would compress and understate the bytes written and hashed.
    arrays = [jax.random.normal(k, (per_array,), jnp.float32) for k in keys]
    params = {f"w{i}": arrays[i] for i in range(NUM_ARRAYS)}
    mu = {f"w{i}": arrays[NUM_ARRAYS + i] for i in range(NUM_ARRAYS)}
    nu = {f"w{i}": arrays[2 * NUM_ARRAYS + i] for i in range(NUM_ARRAYS)}
    return ParamsState(params=params, opt_state=(mu, nu), step=jnp.asarray(1, jnp.int32),
                      rng=jnp.zeros((2,), jnp.uint32))


def stall_seconds(store_class, state: ParamsState, **options) -> float:
    """Wall time of the second save, after the first has finished writing in the background."""
    with tempfile.TemporaryDirectory() as workdir:
        store = store_class(workdir, max_to_keep=2, keep_best=0, async_save=True, save_memory=False, **options)
        store.save(1, state, {"epoch": 0, "step": 1}, {})
        store.manager.wait_until_finished()  # training went on meanwhile; orbax's write is done
        start = time.perf_counter()
        store.save(2, state, {"epoch": 0, "step": 2}, {})
        stall = time.perf_counter() - start
        store.close()
    return stall


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--scale", type=float, default=0.125, help="fraction of the 252M-parameter state")
    parser.add_argument("--repeats", type=int, default=2, help="best of this many")
    args = parser.parse_args()
    num_parameters = int(TG_252M_PARAMETERS * args.scale)
    state = make_state(num_parameters)
    gigabytes = 3 * num_parameters * 4 / 1e9
    print(f"state: {num_parameters:,} parameters + 2 Adam moments = {gigabytes:.2f} GB "
          f"(scale {args.scale:g} of TG-252M), jax {jax.__version__} on {jax.devices()[0].platform}")
    old_class = baseline_store_class()
    variants = [
        ("before: sha256 manifest on the training thread", old_class, dict(checksums=True)),
        ("after: size manifest, background thread (default)", CheckpointStore, dict()),
        ("after: sha256 opted in, background thread", CheckpointStore, dict(checksums=True)),
    ]
    results = {}
    for name, store_class, options in variants:
        results[name] = min(stall_seconds(store_class, state, **options) for _ in range(args.repeats))
        # Hashing grows with the bytes; the new stall is mostly fixed overhead, so this overstates it.
        scaled = f"   (linear to full size: {results[name] / args.scale:6.2f} s)" if args.scale != 1 else ""
        print(f"  {name:52s} stall {results[name]:7.3f} s{scaled}")
    before = results[variants[0][0]]
    for name, _, _ in variants[1:]:
        print(f"ratio before / {name.split(':')[1].strip()}: {before / results[name]:.1f}x")


if __name__ == "__main__":
    sys.exit(main())
