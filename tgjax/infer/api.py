"""One way in for every trained model: `tgjax.load(workdir)`, and what the model it returns can do.

    model = tgjax.load("runs/onlstm_tiny")               # the best checkpoint; step="latest" or an int
    model.family                                          # "onlstm_lm": which trainer wrote it
    model.capabilities                                    # ("scorer", "parser")
    results = model.scorer().search([["the", "dog", "barks"]])   # log p(x) and per-word surprisals
    model.parser()                                        # ON-LSTM's distances; TG/TXL and Pushdown: their beams

The family is what the checkpoint recorded (`meta["family"]`, written by the
trainer; runs from before it have their training config's `trainer`), never
guessed from files. Three capabilities, as small protocols:

* `SentenceScorer`: `search(sentences) -> [BeamResult]` (log p(x) in nats,
  per-word surprisals, the end surprisal; `tgjax.infer.beam.BeamResult`) and
  `space.encode_word(w) -> (id, unknown)`. TG / TXL (CC): the word-synchronous
  beam's marginal; TXL (terminals) and ON-LSTM: the chain rule, exact;
  Pushdown-LM: its beam over (word, attachment).
* `Parser`: the family's trees or heads (TG / TXL (CC) and Pushdown: their
  beams' best trees; ON-LSTM: per-layer syntactic distances; UDGN: heads).
* `Sampler`: TG / TXL (CC) and Pushdown-LM (`tgjax sample`).

Asking for a capability a family lacks is a `CapabilityError` naming the
family and what it offers.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from pathlib import Path
from typing import Any, Protocol

from tgjax.infer.loading import CheckpointError, resolve_step
from tgjax.workdir import FAMILY_NAMES, check_step, local_workdir, recorded_family

# family -> the capabilities it offers, in the order `capabilities` lists them.
CAPABILITIES = {
    "lm": ("scorer", "parser", "sampler"),
    "pushdown_lm": ("scorer", "parser", "sampler"),
    "onlstm_lm": ("scorer", "parser"),
    "mlm": ("parser",),
    "classification": (),
    "cfl": (),
    "craft_bc": (),
    "ppo_options": (),
    "ppo_actions": (),
}
class CapabilityError(ValueError):
    """A capability the loaded family does not have; the message names the family and what it offers."""


class SentenceScorer(Protocol):
    space: Any

    def search(self, sentences: Sequence[Sequence[str]]) -> list: ...


def checkpoint_family(meta: dict[str, Any], where: str) -> str:
    """The family a checkpoint's meta records: its `family`, or (runs from before it was recorded) the
    `trainer` of its training config ("lm" when the config has none)."""
    if meta.get("family") is None and not isinstance(meta.get("config"), dict):
        raise CheckpointError(f"{where} records no family (its meta has neither 'family' nor the training "
                              f"'config'): it was not written by tgjax train; retrain, or add \"family\": "
                              f"\"<trainer>\" to the step's meta/metadata file")
    return recorded_family(meta, meta.get("config"))


def workdir_family(workdir: str | Path, step: str | int = "best") -> str:
    """The family of the workdir's checkpoint `step` (see `checkpoint_family`)."""
    number, meta = resolve_step(workdir, step)
    return checkpoint_family(meta, f"checkpoint step {number} in {workdir}")


@dataclasses.dataclass
class LoadedModel:
    """A workdir's checkpoint, ready for what its family can do (`capabilities`)."""

    workdir: str
    step: str | int
    family: str

    @property
    def capabilities(self) -> tuple[str, ...]:
        return CAPABILITIES.get(self.family, ())

    @property
    def description(self) -> str:
        return f"{FAMILY_NAMES.get(self.family, repr(self.family))} run"

    def _need(self, capability: str, command: str | None) -> None:
        if capability not in self.capabilities:
            offers = ", ".join(self.capabilities) or "none of scorer, parser, sampler"
            who = f"{command}: " if command else ""
            raise CapabilityError(f"{who}{self.workdir} holds {self.description} (family {self.family!r}), which "
                                  f"has no {capability}; it offers: {offers}")

    def scorer(self, *, command: str | None = None, beam=None, pushdown=None, search: str = "auto"):
        """A `SentenceScorer` (see the module docstring); `beam` / `pushdown`: the beams' settings."""
        self._need("scorer", command)
        if self.family == "onlstm_lm":
            from tgjax.infer.onlstm import load_parser

            return load_parser(self.workdir, self.step)
        if self.family == "pushdown_lm":
            from tgjax.infer.pushdown_loading import load_pushdown
            from tgjax.infer.pushdown_search import PushdownBeamConfig, PushdownSearch

            loaded = load_pushdown(self.workdir, step=self.step)
            return PushdownSearch(loaded.model, loaded.vocab, pushdown or PushdownBeamConfig())
        from tgjax.infer.beam import BeamConfig
        from tgjax.infer.loading import load_model

        loaded = load_model(self.workdir, step=self.step)
        return word_scorer([loaded.model], loaded.vocab, [loaded.pipeline_fields["rule"]], beam or BeamConfig(),
                           search)

    def parser(self, *, command: str | None = None, **options):
        """The family's parser: ON-LSTM's `OnLSTMParser` (distances), UDGN's `UDGNParser` (heads); TG / TXL and
        Pushdown parse through their scorers' beams (`scorer().search(...)[i].best_actions`)."""
        self._need("parser", command)
        if self.family == "onlstm_lm":
            from tgjax.infer.onlstm import load_parser

            return load_parser(self.workdir, self.step, **options)
        if self.family == "mlm":
            from tgjax.infer.udgn import load_parser as load_udgn

            return load_udgn(self.workdir, self.step, **options)
        return self.scorer(command=command, **options)


SEARCHES = ("auto", "device", "host")


def resolve_search(search: str) -> str:
    """"device" or "host" for `search`: "auto" is the device engine on an accelerator, the host search on CPU
    (on 2 CPU cores the host search measured faster: benchmarks/beam_search.py, README)."""
    if search not in SEARCHES:
        raise ValueError(f"search: expected one of {SEARCHES}, got {search!r}")
    if search == "auto":
        import jax

        return "host" if jax.default_backend() == "cpu" else "device"
    return search


def word_scorer(models, vocab, rules, config, search: str = "auto"):
    """The word-level scorer of one model or an ensemble: TG / TXL (CC) through the `search` engine
    ("device": `DeviceBeamSearch`, "host": `WordSynchronousBeamSearch`, "auto": see `resolve_search`);
    TXL (terminals) scores directly."""
    search = resolve_search(search)
    rule_list = [rules] if isinstance(rules, str) else list(rules)
    if search == "device" and all(rule in ("tg", "txl_cc") for rule in rule_list):
        from tgjax.infer.device_beam import DeviceBeamSearch

        return DeviceBeamSearch(models, vocab, rules, config)
    from tgjax.infer.beam import make_word_scorer

    return make_word_scorer(models, vocab, rules, config)


def load(workdir: str | Path, step: str | int = "best") -> LoadedModel:
    """The checkpoint `step` ("best", "latest" or an int) of a workdir any `tgjax train` wrote.

    The step is verified against its manifest first (`tgjax.workdir.check_step`: every file present, of its
    size, and of its sha256 sum when the run wrote sums, as training does by default).
    Raises FileNotFoundError (no workdir) or CheckpointError (no checkpoints, no such step, a step that is
    incomplete or corrupt, no family recorded).
    """
    number, meta = resolve_step(workdir, step)
    where = f"checkpoint step {number} in {workdir}"
    problem = check_step(local_workdir(workdir), number)
    if problem:
        raise CheckpointError(f"{where} is corrupt or incomplete: {problem}")
    return LoadedModel(str(workdir), step, checkpoint_family(meta, where))


__all__ = ["CAPABILITIES", "SEARCHES", "CapabilityError", "LoadedModel", "SentenceScorer", "checkpoint_family", "load",
           "resolve_search", "word_scorer", "workdir_family"]
