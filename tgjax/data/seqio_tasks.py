"""seqio Tasks for treebank corpora, for t5x-style users (needs the `seqio` extra: TensorFlow).

A registered Task yields one example per tree with the four 1-D fields the
masking rules take — `inputs`, `inputs_ttypes`, `labels`, `labels_ttypes`
(BOS first, labels shifted left with 0 appended) — already encoded with a
tgjax vocabulary; segmenting and masks stay with `tgjax.syntax.masks`
(`TGMasking(...).compact_chunks_many`), as in the native pipeline.

    from tgjax.data import seqio_tasks
    seqio_tasks.register_treebank_task("ptb_tg", config, vocab)
    ds = seqio.get_mixture_or_task("ptb_tg").get_dataset(sequence_length=None, split="train")
"""

from __future__ import annotations

import dataclasses

from tgjax.data.pipeline import Pipeline, PipelineConfig
from tgjax.data.vocab import Vocabulary

FEATURES = ("inputs", "inputs_ttypes", "labels", "labels_ttypes")


def register_treebank_task(name: str, config: PipelineConfig, vocab: Vocabulary,
                           splits: tuple[str, ...] = ("train", "valid", "test"),
                           corpus_by_split: dict[str, str] | None = None):
    """Registers (replacing any task of that name) and returns a seqio Task over a treebank.

    `config.corpus` is used for every split unless `corpus_by_split` maps a
    split to its own treebank file; for the built-in corpus the split selects
    the built-in split.
    """
    import seqio
    import tensorflow as tf

    def dataset_fn(split: str, shuffle_files: bool, seed: int | None = None) -> tf.data.Dataset:
        del shuffle_files, seed  # one file per split; order is the treebank's
        corpus = (corpus_by_split or {}).get(split, config.corpus)
        pipeline = Pipeline(dataclasses.replace(config, corpus=corpus, split=split), vocab)
        sequences = pipeline.encoded.sequences

        def generate():
            for sequence in sequences:
                yield dict(zip(FEATURES, sequence))

        signature = {f: tf.TensorSpec([None], tf.int32) for f in FEATURES}
        return tf.data.Dataset.from_generator(generate, output_signature=signature)

    vocabulary = seqio.PassThroughVocabulary(size=vocab.size)
    features = {f: seqio.Feature(vocabulary, add_eos=False, required=True) for f in FEATURES}
    seqio.TaskRegistry.remove(name)
    return seqio.TaskRegistry.add(name, seqio.FunctionDataSource(dataset_fn, splits=splits), features)
