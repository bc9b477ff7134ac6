"""One way in for every trained model: `tgjax.load(workdir)`, and what the model it returns can do.

    model = tgjax.load("runs/onlstm_tiny")               # the best checkpoint; step="latest" or an int
    model.family, model.step                              # "onlstm_lm" (which trainer wrote it), the step read
    model.capabilities                                    # ("scorer", "parser")
    results = model.scorer().search([["the", "dog", "barks"]])   # log p(x) and per-word surprisals
    model.parser()                                        # ON-LSTM's distances; TG/TXL and Pushdown: their beams
    model.restore()                                       # the family's network with its vocabulary and config

The family is what the checkpoint recorded (`meta["family"]`, written by the
trainer; runs from before it have their training config's `trainer`), never
guessed from files. `load` reads the step's meta and checks its files; the
parameters are read when a capability (or `restore`) first needs them. The
capabilities, as small protocols:

* `SentenceScorer` (`scorer()`): `search(sentences) -> [BeamResult]` (log p(x)
  in nats, per-word surprisals, the end surprisal; `tgjax.infer.beam.BeamResult`)
  and `space.encode_word(w) -> (id, unknown)`. TG / TXL (CC): the
  word-synchronous beam's marginal; TXL (terminals), ON-LSTM and the
  stack-attention LM on words (`stack_lm`): the chain rule, exact
  (`EXACT_RULES`); Pushdown-LM: its beam over (word, attachment), on TG's
  device engine. Several TG / TXL models: `sentence_scorer(models)`, one beam
  over their per-action mixture.
  What `tgjax eval score` and `ppl` read of a file of trees or of words, per
  model: `scores_input(input_format)`.
* `Parser` (`parser()`): what the family parses into, `PARSES`: trees (TG /
  TXL (CC) and Pushdown: their scorers' beams, `search(...)[i].best_actions`),
  per-layer syntactic distances (ON-LSTM: `OnLSTMParser`), heads (UDGN:
  `UDGNParser`).
* `Sampler` (`sampler()`): `sample(n, seed=, prompt=)` -> samples with `.tree`,
  `.log_prob`, `.fields()`; `note(samples)`. TG / TXL (CC) (`tgjax.infer.sampling`)
  and Pushdown-LM (`tgjax.infer.pushdown_sampling`).
* `tree_scorer()`: the teacher-forced log p of given trees (TXL (terminals): of
  their words), batched and streamed (`tgjax.infer.scoring.Scorer`, what
  `tgjax eval score / ppl / rerank` read). TG / TXL.
* `policy()`: a Craft policy and its checkpoint, to roll out (`tgjax.infer.craft`;
  `tgjax eval craft`). Craft behaviour cloning (`craft_bc`).

Asking for a capability a family lacks is a `CapabilityError` naming the
family and what it offers. `restore(**options)` is the family's network and
what came with it (`FAMILY_TABLE` says which, per family); the per-family
loaders behind it are private to `tgjax.infer`.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from pathlib import Path
from typing import Any, Protocol

from tgjax.infer.loading import CheckpointError, resolve_step
from tgjax.workdir import FAMILY_NAMES, check_step, recorded_family, workdir_path

# family -> the capabilities it offers, in the order `capabilities` lists them (a TG / TXL run of the words-only
# TXL (terminals) offers SCORES_WORDS_ONLY: it neither parses nor samples trees).
CAPABILITIES = {
    "lm": ("scorer", "parser", "sampler", "tree_scorer"),
    "pushdown_lm": ("scorer", "parser", "sampler"),
    "onlstm_lm": ("scorer", "parser"),
    "mlm": ("parser",),
    "classification": (),
    "cfl": (),
    "craft_bc": ("policy",),
    "ppo_options": (),
    "ppo_actions": (),
    "stack_lm": ("scorer",),
}
SCORES_WORDS_ONLY = ("scorer", "tree_scorer")
# family -> what its `rule` is (TG / TXL: read from the meta); the rules whose `scorer()` gives log p(x) exactly,
# by the chain rule (the others search a beam over parses).
RULES = {"pushdown_lm": "pushdown", "onlstm_lm": "onlstm_lm", "stack_lm": "stack_lm"}
EXACT_RULES = ("txl_terminals", "onlstm_lm", "stack_lm")
# The families that score word strings alone: their `restore()` is their exact `SentenceScorer`, and the commands
# that read log p of words (eval score, ppl, sg, blimp) take their runs beside TG / TXL and Pushdown-LM.
WORD_SCORERS = ("onlstm_lm", "stack_lm")
# family -> how `tgjax eval score` scores given trees when it has no `tree_scorer`: "gold_joint", the Pushdown-LM's
# teacher-forced log p(x, y) of each tree (eq. 7, `tgjax.eval.pushdown`).
JOINT_SCORERS = {"pushdown_lm": "gold_joint"}
# family -> what its `parser()` gives, and the command that evaluates it.
PARSES = {"lm": "trees", "pushdown_lm": "trees", "onlstm_lm": "distances", "mlm": "heads"}
PARSE_COMMANDS = {"trees": "tgjax eval parse", "distances": "tgjax eval unsupervised-parse",
                  "heads": "tgjax eval dependency"}
# family -> what `restore()` gives (its loader is the `_restore` entry of that family, below).
FAMILY_TABLE = {
    "lm": "tgjax.infer.loading.RestoredLM (options sequence_length, memory_length, device)",
    "pushdown_lm": "tgjax.infer.pushdown_loading.LoadedPushdown",
    "onlstm_lm": "tgjax.infer.onlstm.OnLSTMParser (options batch_size, length_bucket)",
    "mlm": "tgjax.infer.udgn.UDGNParser (options batch_size, length_bucket)",
    "craft_bc": "(policy, tgjax.infer.loading.FamilyCheckpoint)",
    "stack_lm": "tgjax.infer.stack_lm.StackLMScorer (options batch_size, length_bucket)",
}
MEMORY = "<memory>"


class CapabilityError(ValueError):
    """A capability the loaded family does not have; the message names the family and what it offers."""


class SentenceScorer(Protocol):
    space: Any

    def search(self, sentences: Sequence[Sequence[str]]) -> list: ...


class Sampler(Protocol):
    def sample(self, num_samples: int, *, seed: int = 0, prompt=None) -> list: ...

    def note(self, samples) -> str: ...


def checkpoint_family(meta: dict[str, Any], where: str) -> str:
    """The family a checkpoint's meta records: its `family`, or (runs from before it was recorded) the
    `trainer` of its training config ("lm" when the config has none)."""
    if meta.get("family") is None and not isinstance(meta.get("config"), dict):
        raise CheckpointError(f"{where} records no family (its meta has neither 'family' nor the training "
                              f"'config'): it was not written by tgjax train; retrain, or add \"family\": "
                              f"\"<trainer>\" to the step's meta/metadata file")
    return recorded_family(meta, meta.get("config"))


def _restore(family: str, workdir: str, step: int, options: dict[str, Any]):
    """The family table: the restored network of `family` (what `FAMILY_TABLE` says) from `workdir`'s `step`."""
    if family == "lm":
        from tgjax.infer.loading import _restore_lm

        return _restore_lm(workdir, step=step, **options)
    if family == "pushdown_lm":
        from tgjax.infer.pushdown_loading import _restore_pushdown

        return _restore_pushdown(workdir, step=step, **options)
    if family == "onlstm_lm":
        from tgjax.infer.onlstm import _restore_parser as restore_onlstm

        return restore_onlstm(workdir, step, **options)
    if family == "mlm":
        from tgjax.infer.udgn import _restore_parser as restore_udgn

        return restore_udgn(workdir, step, **options)
    if family == "craft_bc":
        from tgjax.infer.craft import _restore_policy

        return _restore_policy(workdir, step, **options)
    if family == "stack_lm":
        from tgjax.infer.stack_lm import _restore_scorer as restore_stack_lm

        return restore_stack_lm(workdir, step, **options)
    raise CapabilityError(f"{workdir} holds {_described(family)} (family {family!r}): tgjax.load reads its family "
                          f"and step, but restores the networks of {', '.join(FAMILY_TABLE)} only")


def _described(family: str) -> str:
    return f"{FAMILY_NAMES.get(family, repr(family))} run"


@dataclasses.dataclass
class LoadedModel:
    """A workdir's checkpoint, ready for what its family can do (`capabilities`; module docstring).

    Attributes:
      workdir: as given to `load` (`MEMORY` for a model `in_memory`, or the name given it).
      step: the checkpoint step read ("best" and "latest" resolved; -1 in memory).
      family: the trainer that wrote it (`lm`, `pushdown_lm`, `onlstm_lm`, `mlm`, `craft_bc`, ...).
      meta: the step's meta item (the run's facts; the training config under "config").
    """

    workdir: str
    step: int
    family: str
    meta: dict[str, Any] = dataclasses.field(default_factory=dict, repr=False)
    _restored: dict = dataclasses.field(default_factory=dict, repr=False, compare=False)
    _in_memory: bool = dataclasses.field(default=False, repr=False, compare=False)

    @classmethod
    def in_memory(cls, family: str, restored, *, workdir: str = MEMORY) -> LoadedModel:
        """A model in memory (what `restore()` would give for `family`, e.g. `tgjax.infer.loading.from_model`'s
        `RestoredLM`) with the capabilities of its family: for tests and notebooks."""
        step = getattr(restored, "step", -1)
        model = cls(workdir, step if isinstance(step, int) else -1, family, dict(getattr(restored, "meta", {}) or {}),
                    _in_memory=True)
        model._restored[()] = restored
        return model

    @property
    def capabilities(self) -> tuple[str, ...]:
        if self.family == "lm" and self.rule == "txl_terminals":
            return SCORES_WORDS_ONLY
        return CAPABILITIES.get(self.family, ())

    @property
    def description(self) -> str:
        """The kind of run, in words ("an ON-LSTM run")."""
        return _described(self.family)

    @property
    def rule(self) -> str | None:
        """What the family's scorer reads: `tg`, `txl_cc`, `txl_terminals` (TG / TXL: from the meta, no parameter
        read), `pushdown`, `onlstm_lm`, `stack_lm`; None for a family that scores no sentence."""
        if self.family == "lm":
            restored = next(iter(self._restored.values()), None)
            if restored is not None:
                return restored.rule
            from tgjax.infer.loading import lm_rule

            return lm_rule(self.meta, self._where)
        return RULES.get(self.family)

    @property
    def scores_exactly(self) -> bool:
        """Whether `scorer()` gives log p(x) exactly (the chain rule: `EXACT_RULES`), not a beam's marginal."""
        return "scorer" in self.capabilities and self.rule in EXACT_RULES

    def scores_input(self, input_format: str, *, command: str | None = None) -> str:
        """How this model scores each sentence of a file of `input_format` ("trees" or "words"), as `tgjax eval
        score` and `tgjax eval ppl` read it: "tree_scorer" (the teacher-forced `tree_scorer()`: TG / TXL (CC) the
        given tree's actions, TXL (terminals) the words), "gold_joint" (`JOINT_SCORERS`: a Pushdown-LM's log
        p(x, y) of the given tree) or "scorer" (an exact `SentenceScorer`: log p(words </s>) by the chain rule, of
        each line's words or each tree's). A `CapabilityError` for what the model cannot score."""
        if input_format not in ("trees", "words"):
            raise ValueError(f"input format: expected 'trees' or 'words', got {input_format!r}")
        if input_format == "trees" and "tree_scorer" in self.capabilities:
            return "tree_scorer"
        if input_format == "trees" and self.family in JOINT_SCORERS:
            return JOINT_SCORERS[self.family]
        if "tree_scorer" in self.capabilities and self.rule == "txl_terminals":
            return "tree_scorer"
        if self.scores_exactly:
            return "scorer"
        reads = f" (`{command}` reads {input_format})" if command else ""  # named inside: see `require`
        what = f"{self.workdir} holds {self.description} (family {self.family!r}){reads}"
        if input_format == "words" and ("tree_scorer" in self.capabilities or self.family in JOINT_SCORERS):
            raise CapabilityError(f"{what}, which scores given trees (log p(x, y)), not words alone: give trees "
                                  f"(--input-format trees), or use tgjax eval sg / blimp, which search the parses")
        offers = ", ".join(self.capabilities) or "none of scorer, parser, sampler"
        raise CapabilityError(f"{what}, which has no exact scorer of sentences nor of trees; it offers: {offers}")

    @property
    def model_name(self) -> str:
        """The model's registry name (TG / TXL: `tg`, `txl_cc`, `txl_terminals`, ...); other families: the family."""
        if self.family == "lm":
            restored = next(iter(self._restored.values()), None)
            if restored is not None:
                return restored.model_name
            return str(((self.meta.get("config") or {}).get("model") or {}).get("name", "lm"))
        return self.family

    @property
    def _where(self) -> str:
        return f"checkpoint step {self.step} in {self.workdir}"

    def describe(self) -> str:
        """The restored model in words (its name, workdir and step)."""
        restored = self.restore()
        return restored.describe() if hasattr(restored, "describe") else f"{self.description} ({self._where})"

    def require(self, capability: str, *, command: str | None = None, parses: str | None = None) -> None:
        """A `CapabilityError` unless the family has `capability` (and, with `parses`, its parser gives that:
        "trees", "distances" or "heads"); the message names the workdir, the family, what it offers and `command`.
        The command is named inside the message, not as a prefix: a command prints its own `PROG: error: `."""
        what = f"{self.workdir} holds {self.description} (family {self.family!r})"
        if capability not in self.capabilities:
            offers = ", ".join(self.capabilities) or "none of scorer, parser, sampler"
            needs = f" (`{command}` needs one)" if command else ""
            raise CapabilityError(f"{what}, which has no {capability}{needs}; it offers: {offers}")
        if parses is not None and capability == "parser" and PARSES[self.family] != parses:
            gives = PARSES[self.family]
            needs = f" (`{command}` reads {parses})" if command else ""
            raise CapabilityError(f"{what}, whose parser gives {gives}, not {parses}{needs}: "
                                  f"use `{PARSE_COMMANDS[gives]}`")

    def restore(self, **options):
        """The family's network with its parameters, vocabulary and config (`FAMILY_TABLE`: which object, and its
        options), read once per distinct options. Raises FileNotFoundError, CheckpointError, VocabularyMismatch."""
        key = tuple(sorted((name, value) for name, value in options.items() if value is not None))
        if key not in self._restored:
            if self._in_memory:
                raise ValueError(f"{self.workdir}: a model in memory has no checkpoint to restore with {dict(key)}")
            self._restored[key] = _restore(self.family, self.workdir, self.step, dict(key))
        return self._restored[key]

    def scorer(self, *, command: str | None = None, beam=None, pushdown=None, search: str = "auto"):
        """A `SentenceScorer` (module docstring; `sentence_scorer` of this model alone)."""
        return sentence_scorer([self], command=command, beam=beam, pushdown=pushdown, search=search)

    def parser(self, *, command: str | None = None, parses: str | None = None, **options):
        """The family's parser (`PARSES`): ON-LSTM's `OnLSTMParser` (distances), UDGN's `UDGNParser` (heads), each
        with `options` (batch_size, length_bucket); TG / TXL and Pushdown parse through their scorers' beams
        (`options`: `scorer`'s). `parses`: what the caller reads ("trees", "distances", "heads"), else a
        CapabilityError naming the command that reads this family's."""
        self.require("parser", command=command, parses=parses)
        if PARSES[self.family] == "trees":
            return self.scorer(command=command, **options)
        return self.restore(**options)

    def sampler(self, *, command: str | None = None, temperature: float = 1.0, top_k: int = 0, top_p: float = 1.0,
                max_length: int = 256, allow_unk: bool = True, max_open_nts: int = 32, max_consecutive_opens: int = 6,
                batch_size: int = 64) -> Sampler:
        """A `Sampler`: TG / TXL (CC)'s `tgjax.infer.sampling.Sampler` (well-formed trees; `max_length` actions,
        `max_open_nts`, `max_consecutive_opens`, `batch_size` rows per call) or a Pushdown-LM's
        `PushdownSampler` (sentences of at most `min(max_length, 512)` tokens; the tree caps are TG's)."""
        self.require("sampler", command=command)
        if self.family == "pushdown_lm":  # the settings are checked before any parameter is read
            from tgjax.infer.pushdown_sampling import PushdownSampler, PushdownSamplingConfig

            config = PushdownSamplingConfig(temperature=temperature, top_k=top_k, top_p=top_p,
                                            max_tokens=min(max_length, 512), allow_unk=allow_unk)
            restored = self.restore()
            return PushdownSampler(restored.model, restored.vocab, config)
        from tgjax.infer.sampling import Sampler as TreeSampler
        from tgjax.infer.sampling import SamplingConfig

        settings = SamplingConfig(temperature=temperature, top_k=top_k, top_p=top_p, max_actions=max_length,
                                  max_open_nts=max_open_nts, max_consecutive_opens=max_consecutive_opens,
                                  allow_unk=allow_unk, batch_size=batch_size)
        restored = self.restore()
        return TreeSampler(restored.model, restored.vocab, restored.rule, settings)

    def policy(self, *, command: str | None = None):
        """(the Craft policy, its `FamilyCheckpoint`) of a `craft_bc` run (`tgjax.infer.craft`)."""
        self.require("policy", command=command)
        return self.restore()

    def require_family(self, family: str, *, command: str, reads: str) -> None:
        """A `CapabilityError` unless this is a `family` run: for a command that reads one family's network
        itself (`reads`: what it reads, in words), not through a capability."""
        if self.family != family:
            raise CapabilityError(f"{self.workdir} holds {self.description} (family {self.family!r}); "
                                  f"`{command}` reads {reads}")

    def tree_scorer(self, *, command: str | None = None, batch_size: int = 32, sequence_length: int | None = None,
                    memory_length: int | None = None):
        """The teacher-forced scorer of given trees (TXL (terminals): their words), `tgjax.infer.scoring.Scorer`,
        with evaluation-time segment and memory lengths if given (module docstring)."""
        self.require("tree_scorer", command=command)
        from tgjax.infer.scoring import Scorer

        return Scorer(self.restore(sequence_length=sequence_length, memory_length=memory_length),
                      batch_size=batch_size)


def sentence_scorer(models: Sequence[LoadedModel], *, command: str | None = None, beam=None, pushdown=None,
                    search: str = "auto"):
    """The `SentenceScorer` of one model, or of the per-action uniform mixture of several (one beam over the
    mixed next-action distribution, `tgjax.infer.beam`; TG paper §3.7).

    `beam`: TG / TXL (CC)'s `BeamConfig`; `pushdown`: a Pushdown-LM's `PushdownBeamConfig`; `search`: TG / TXL
    (CC)'s engine (`word_scorer`); a Pushdown-LM is always searched by the device engine (`PushdownSearch`, on
    `tgjax.infer.device_beam`; its host beam is the tests' oracle). An ensemble's members must be TG / TXL runs
    sharing one vocabulary, all syntactic (TG, TXL (CC)) or all words-only (TXL (terminals)).
    """
    if not models:
        raise ValueError("no model to score sentences with")
    for model in models:
        model.require("scorer", command=command)
    if len(models) > 1:
        alone = next((m for m in models if m.family != "lm"), None)
        if alone is not None:
            raise ValueError(f"an ensemble mixes TG / TXL models only: {alone.workdir} holds {alone.description}, "
                             f"which is searched alone ({len(models)} models given)")
    first = models[0]
    if first.family in WORD_SCORERS:
        return first.restore()
    if first.family == "pushdown_lm":
        from tgjax.infer.pushdown_search import PushdownBeamConfig, PushdownSearch

        loaded = first.restore()
        return PushdownSearch(loaded.model, loaded.vocab, pushdown or PushdownBeamConfig())
    from tgjax.infer.beam import BeamConfig

    restored = [m.restore() for m in models]
    names = _member_names(models)
    for r, name in zip(restored[1:], names[1:]):
        if r.vocab_fingerprint != restored[0].vocab_fingerprint:
            raise ValueError(f"an ensemble's members must share one vocabulary: {name} has another than {names[0]}")
    rules = [r.rule for r in restored]
    if len({rule == "txl_terminals" for rule in rules}) > 1:
        raise ValueError(f"an ensemble mixes syntactic models or words-only models, not both: {', '.join(names)}")
    return word_scorer([r.model for r in restored], restored[0].vocab, rules, beam or BeamConfig(), search)


def _member_names(models: Sequence[LoadedModel]) -> list[str]:
    return [f"{m.model_name} ({m.workdir})" for m in models]


def describe_scorer(models: Sequence[LoadedModel], *, pushdown=None) -> str:
    """What `sentence_scorer(models, pushdown=...)` scores with, in words (a Pushdown-LM's beam size; an
    ensemble's members)."""
    first = models[0]
    if first.family == "pushdown_lm":
        from tgjax.infer.pushdown_search import PushdownBeamConfig

        return f"{first.describe()}, beam {(pushdown or PushdownBeamConfig()).beam_size}"
    if first.family != "lm":
        return first.describe()
    names = _member_names(models)
    return names[0] if len(names) == 1 else "ensemble (per-action mixture) of " + ", ".join(names)


SEARCHES = ("auto", "device", "host")


def resolve_search(search: str) -> str:
    """"device" or "host" for `search`: "auto" is the device engine, the faster on every platform measured
    (benchmarks/beam_search.py, ToTC-size TG, beam 5/20/1: on 2 CPU cores 1.3-2.1x the host search's
    sentences/s on 16 ToTC test sentences, compiling in 10-11 s against 23-24 s, and 1.5x on 64; on a GPU
    15-20x; docs/benchmarks.md)."""
    if search not in SEARCHES:
        raise ValueError(f"search: expected one of {SEARCHES}, got {search!r}")
    return "device" if search == "auto" else search


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
    """The checkpoint `step` ("best", "latest" or an int) of a workdir any `tgjax train` wrote: a local directory
    or a bucket URL (`gs://bucket/run`), read where it is (`tgjax.workdir.workdir_path`); only steps whose save
    finished count (`tgjax.workdir.committed_steps`).

    The step is verified against its manifest first (`tgjax.workdir.check_step`: every file present, of its
    size, and of its sha256 sum when the run wrote sums, as training does by default).
    Raises FileNotFoundError (no workdir) or CheckpointError (no checkpoints, no such step, a step that is
    incomplete or corrupt, no family recorded).
    """
    number, meta = resolve_step(workdir, step)
    where = f"checkpoint step {number} in {workdir}"
    problem = check_step(workdir_path(workdir), number)
    if problem:
        raise CheckpointError(f"{where} is corrupt or incomplete: {problem}")
    return LoadedModel(str(workdir), number, checkpoint_family(meta, where), meta)


__all__ = ["CAPABILITIES", "EXACT_RULES", "FAMILY_TABLE", "MEMORY", "PARSES", "SEARCHES", "WORD_SCORERS",
           "CapabilityError", "LoadedModel", "Sampler", "SentenceScorer", "checkpoint_family", "describe_scorer",
           "load", "resolve_search", "sentence_scorer", "word_scorer"]
