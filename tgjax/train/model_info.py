"""What `tgjax info` says of a configuration's model before anything trains.

Every family's `describe(config)` returns a `ModelInfo`: the model's name and resolved settings, where its
vocabulary size comes from, and how to build it. The parameter count is derived from the builder (built
abstractly, nothing allocated), so no family counts by hand; `tgjax info` lays the same builder out on the
configured mesh to print each parameter's partition.
"""

from __future__ import annotations

import dataclasses
import functools
from collections.abc import Callable
from typing import Any

from flax import nnx

from tgjax.nn.params import count_parameters


@dataclasses.dataclass
class ModelInfo:
    """A configuration's model, as `tgjax info` prints it (`to_json` for `--json`)."""

    name: str  # e.g. "pushdown_lm", "lstm_listops", "ppo_actions lstm policy with a value head (fresh)"
    vocab_size: int
    vocab_source: str  # where `vocab_size` comes from, in words ("built from PATH", "model.vocab_size", ...)
    settings: dict[str, Any]  # the model's resolved config (a dataclass's `asdict`, or the config's `model`)
    build: Callable[[nnx.Rngs], nnx.Module]  # the model, fresh, from these RNG streams
    note: str = ""  # a line printed under the count (a baseline's size against the model it is matched to)
    extras: dict[str, Any] = dataclasses.field(default_factory=dict)  # further `--json` fields (the CFL task)

    @functools.cached_property
    def num_parameters(self) -> int:
        """The model's parameter count, from its shapes alone."""
        return count_parameters(lambda: self.build(nnx.Rngs(0)))

    def to_json(self) -> dict[str, Any]:
        """The `tgjax info --json` fields (the builder left out)."""
        fields = {"model_name": self.name, "num_parameters": self.num_parameters, "vocab_size": self.vocab_size,
                  "vocab_source": self.vocab_source, "model": self.settings}
        if self.note:
            fields["model_note"] = self.note
        return {**self.extras, **fields}
