"""Training data from a config: pipelines for train and valid, the vocabulary and its checks, and reports.

- The vocabulary is built from the training trees (or loaded from
  `data.vocab_path`) and saved in the workdir. On resume it must match the
  saved one (else `tgjax.workdir.VocabularyMismatch`, which names both and the first
  difference): a model cannot be read with another vocabulary.
- Stack entries that do not fit in `model.memory_length` are counted over the
  whole corpus with the pipeline's own rule (`rule.stats.dropped_stack_entries`)
  and reported, or refused with `data.on_dropped_stack_entries="error"`.
- The unigram baseline: cross-entropy of validation labels under the training
  label distribution (add-one smoothing), per prediction event, the same
  events the model's loss counts.
"""

from __future__ import annotations

import dataclasses
import logging
import os
from pathlib import Path

import numpy as np

from tgjax.data import pipeline as pl
from tgjax.data.vocab import Vocabulary, WordDictionary, load_vocabulary
from tgjax.models import ModelConfig, model_spec
from tgjax.syntax import masks
from tgjax.syntax import token_types as tt
from tgjax.workdir import VocabularyMismatch, saved_vocabulary_path, vocabulary_file_name, vocabulary_fingerprint

log = logging.getLogger(__name__)


@dataclasses.dataclass
class DroppedStackReport:
    """How much of the stack did not fit in memory (TG smart memory only)."""

    split: str
    sequences: int
    dropped_stack_entries: int
    sequences_with_dropped_entries: int
    memory_length: int

    def __str__(self) -> str:
        return (f"{self.split}: {self.dropped_stack_entries} stack entries in {self.sequences_with_dropped_entries} of "
                f"{self.sequences} sequences did not fit in model.memory_length={self.memory_length} "
                f"(rule.stats.dropped_stack_entries; the oldest entries of a full memory are dropped)")


@dataclasses.dataclass
class TrainingData:
    vocab: Vocabulary
    vocab_path: Path  # the copy in the workdir
    train: pl.Pipeline
    valid: pl.Pipeline | None
    dropped: list[DroppedStackReport]


def pipeline_config(config, model_config: ModelConfig, split: str, batch_size: int) -> pl.PipelineConfig:
    """The `PipelineConfig` of one split, matched to the model by the registry."""
    data = config.data
    path = data.train_path if split == "train" else data.valid_path
    builtin = path == "builtin"
    fields = model_spec(config.model.name).pipeline_fields(model_config)
    return pl.PipelineConfig(
        corpus="builtin" if builtin else path,
        split=split,
        num_sentences=(data.num_train_sentences if split == "train" else data.num_valid_sentences) if builtin else None,
        batch_size=batch_size,
        max_actions=data.max_actions,
        max_words=data.get("max_words", pl.MAX_WORDS),  # configs saved before it had no such key
        on_too_long=data.on_too_long,
        on_bad_tree=data.on_bad_tree,
        seed=data.corpus_seed if builtin else config.training.seed,
        num_workers=data.num_workers if split == "train" else 0,
        **fields,
    )


def _check_file(key: str, path: str) -> None:
    if path == "builtin":
        return
    if not os.path.exists(path):
        raise FileNotFoundError(f"{key}: no such treebank file {path!r}")
    if os.path.isdir(path):
        raise ValueError(f"{key}: {path!r} is a directory; give a treebank file (one bracketed tree per line)")
    if os.path.getsize(path) == 0:
        raise ValueError(f"{key}: treebank file {path!r} is empty")


def _naming_key(key: str, error: Exception) -> Exception:
    """`error`'s message prefixed by the config key, as a FileNotFoundError or a plain ValueError.

    Not `type(error)(...)`: subclasses such as `TreeSyntaxError` take other
    constructor arguments than one message.
    """
    kind = FileNotFoundError if isinstance(error, FileNotFoundError) else ValueError
    return kind(f"{key}: {error}")


def load_trees(pcfg: pl.PipelineConfig, key: str):
    """The trees of one split; errors name the config key (`key`) and the file."""
    _check_file(key, pcfg.corpus)
    try:
        tree_list, report = pl.load_trees(pcfg)
    except (ValueError, FileNotFoundError) as e:
        raise _naming_key(key, e) from e
    if not tree_list:
        raise ValueError(f"{key}: {pcfg.corpus!r} holds no trees")
    if report is not None and report.num_skipped:
        log.warning("%s: %s", key, report.summary())
    return tree_list


def _first_difference(a: Vocabulary, b: Vocabulary) -> str:
    if isinstance(a, WordDictionary) and isinstance(b, WordDictionary):
        for i, (x, y) in enumerate(zip(a._tokens, b._tokens)):
            if x != y:
                return f"; first difference at id {i}: {x!r} here, {y!r} in the saved one"
    return ""


def resolve_vocabulary(config, train_trees, workdir: Path, *, resuming: bool, save: bool = True
                       ) -> tuple[Vocabulary, Path]:
    """The run's vocabulary, saved to (or checked against) the workdir copy.

    Fresh run: load `data.vocab_path`, or build one from the training trees
    (`data.vocabulary`: "words" or "sentencepiece" of `model.vocab_size`
    pieces), and save it in the workdir. Resuming: the workdir copy is the
    checkpoints' vocabulary; a `data.vocab_path`, or a word dictionary rebuilt
    from the training trees, must equal it. (A SentencePiece model is not
    retrained on resume: the saved one is used.)
    """
    data = config.data
    saved = saved_vocabulary_path(workdir)
    if resuming and saved is None:
        raise VocabularyMismatch(f"{workdir} holds checkpoints but no vocabulary (vocab.json / vocab.model): "
                                 f"cannot tell which vocabulary they were trained with")
    if data.vocab_path:
        if not os.path.exists(data.vocab_path):
            raise FileNotFoundError(f"data.vocab_path: no such vocabulary file {data.vocab_path!r}")
        vocab = load_vocabulary(data.vocab_path)
        source = f"data.vocab_path={data.vocab_path}"
    elif resuming and data.vocabulary == "sentencepiece":
        return load_vocabulary(saved), saved
    else:
        rule = model_spec(config.model.name).pipeline["rule"]
        # POS tags or not: decided over the whole training file, as the pipeline decides (`pl.corpus_pos_tags`).
        tagged = pl.corpus_pos_tags(train_trees, "auto", data.train_path)
        tokens = [pl.tokens_for_rule(t, rule, pos_tags=tagged) for t in train_trees]
        size = config.model.vocab_size or 32768
        vocab = pl.build_vocabulary(tokens, kind=data.vocabulary, size=size, min_count=data.min_word_count)
        source = f"the training trees ({data.train_path})"
    if resuming:
        previous = load_vocabulary(saved)
        if vocabulary_fingerprint(vocab) != vocabulary_fingerprint(previous):
            raise VocabularyMismatch(
                f"the vocabulary from {source} ({vocab.size} ids) does not match {saved} ({previous.size} ids), "
                f"the vocabulary the checkpoints in {workdir} were trained with{_first_difference(vocab, previous)}. "
                f"Use the original data / data.vocab_path, or a new --workdir")
        return previous, saved
    path = workdir / vocabulary_file_name(vocab)
    if save:  # one writer (process 0) when hosts share the workdir
        vocab.save(path)
    return vocab, path


def count_dropped_stack_entries(pipeline: pl.Pipeline, split: str, chunk: int = 512) -> DroppedStackReport:
    """Runs the pipeline's rule once over every sequence and reads `rule.stats` (exact counts)."""
    rule = pl.make_rule(pipeline.config)
    sequences = pipeline.encoded.sequences
    if isinstance(rule, masks.TGMasking):
        for start in range(0, len(sequences), chunk):
            rule.compact_chunks_many(sequences[start:start + chunk])
    stats = rule.stats
    return DroppedStackReport(split, len(sequences), stats.dropped_stack_entries,
                              stats.sequences_with_dropped_entries, pipeline.config.mem_len)


def make_training_data(config, model_config_fn, workdir: Path, *, resuming: bool, process_index: int = 0,
                       process_count: int = 1) -> TrainingData:
    """Trees -> vocabulary -> train and valid pipelines, with the memory report.

    `model_config_fn(vocab_size) -> ModelConfig` gives the model the pipeline
    must match (segment and memory lengths, rule switches).
    """
    probe = model_config_fn(config.model.vocab_size or 1)  # lengths and switches only; the size comes later
    train_cfg = pipeline_config(config, probe, "train", config.training.batch_size)
    train_trees = load_trees(train_cfg, "data.train_path")
    vocab, vocab_path = resolve_vocabulary(config, train_trees, workdir, resuming=resuming, save=process_index == 0)
    model_config = model_config_fn(vocab.size)
    train_cfg = pipeline_config(config, model_config, "train", config.training.batch_size)
    train = pl.Pipeline(train_cfg, vocab, tree_list=train_trees, process_index=process_index,
                        process_count=process_count)
    valid = None
    if config.data.valid_path:
        valid_cfg = pipeline_config(config, model_config, "valid", config.evaluation.batch_size)
        valid_trees = load_trees(valid_cfg, "data.valid_path")
        try:
            valid = pl.Pipeline(valid_cfg, vocab, tree_list=valid_trees, process_index=process_index,
                                process_count=process_count)
        except ValueError as error:  # e.g. a label the training data's vocabulary lacks
            raise ValueError(f"data.valid_path: {error}") from error
    dropped = [count_dropped_stack_entries(p, split) for split, p in (("train", train), ("valid", valid)) if p]
    for report in dropped:
        if report.dropped_stack_entries:
            if config.data.on_dropped_stack_entries == "error":
                raise ValueError(f"memory too short: {report} (data.on_dropped_stack_entries='error'; "
                                 f"raise model.memory_length or set it to 'warn')")
            log.info("memory too short: %s", report)  # the loop reports it
    return TrainingData(vocab, vocab_path, train, valid, dropped)


def label_counts(encoded: pl.EncodedCorpus, vocab_size: int) -> np.ndarray:
    """`[V]` counts of the labels at prediction events (every label except the final padding)."""
    counts = np.zeros(vocab_size, np.int64)
    for _, _, labels, labels_ttypes in encoded.sequences:
        events = labels_ttypes != tt.PAD
        np.add.at(counts, labels[events], 1)
    return counts


def unigram_cross_entropy(train: pl.EncodedCorpus, valid: pl.EncodedCorpus, vocab_size: int) -> float:
    """Mean -log p(label) over validation prediction events, p the add-one-smoothed training unigram (nats)."""
    train_counts = label_counts(train, vocab_size)
    log_p = np.log(train_counts + 1.0) - np.log(train_counts.sum() + vocab_size)
    valid_counts = label_counts(valid, vocab_size)
    return float(-(valid_counts * log_p).sum() / max(valid_counts.sum(), 1))
