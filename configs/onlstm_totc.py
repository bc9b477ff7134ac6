"""onlstm_totc: an ON-LSTM language model on the words of Tale of Two Cities, at a size a CPU trains.

The treebank (6,904 / 346 / 293 sentences, about 150k / 8k words) sits in
../shared/data/tale_of_two_cities beside the repository; the words are the
trees' leaves, one sentence per tree, `<eos>` after each (punctuation kept, as
in Mikolov's PTB LM files it is not: these are the treebank's tokens).
Words seen once in training read as `<unk>` (`data.min_word_count = 2`) so
that the unseen words of validation have a trained class.

The paper's recipe (configs/onlstm_ptb.py) at a CPU scale: 3 layers [200 ->
400 -> 400 -> 200], chunk 10, the paper's dropouts, SGD lr 30 with the random
BPTT lengths around 70, NT-ASGD with nonmono 5, validation every epoch.
Other files: `--config configs/onlstm_totc.py:TRAIN,VALID`.

    tgjax train --config configs/onlstm_totc.py --workdir runs/onlstm_totc
"""

from pathlib import Path

import ml_collections

TREEBANK = Path(__file__).resolve().parents[1].parent / "shared" / "data" / "tale_of_two_cities"


def get_config(paths: str | None = None):
    train_path, valid_path = (paths.split(",") if paths else (str(TREEBANK / "train.txt"),
                                                              str(TREEBANK / "valid.txt")))
    return ml_collections.ConfigDict(dict(
        trainer="onlstm_lm",
        model=dict(
            embedding_size=200, hidden_size=400, num_layers=3, chunk_size=10,
            dropout=0.45, dropout_hidden=0.3, dropout_input=0.5, dropout_embedding=0.1, weight_drop=0.45,
        ),
        data=dict(
            source="treebank", train_path=train_path, valid_path=valid_path,
            num_train_sentences=None, num_valid_sentences=None, corpus_seed=0, min_word_count=2,
            vocabulary_from="train",
        ),
        training=dict(
            batch_size=20, bptt=70, bptt_short_probability=0.05, bptt_std=5.0, min_seq_len=5,
            length_bucket=16,
            lr=30.0, weight_decay=1.2e-6, clip=0.25, alpha=2.0, beta=1.0,
            asgd=True, nonmono=5, asgd_as_released=False,
            num_epochs=40, num_steps=None, seed=141,
        ),
        evaluation=dict(every_epoch=True, interval_steps=0, batch_size=10, bptt=70),
        checkpointing=dict(interval_steps=500, max_to_keep=2, keep_best=1, async_save=True, checksums=True,
                           save_memory=True),
        logging=dict(interval_steps=20, tensorboard=True),
        mesh=dict(data=-1, model=1),
        distributed=dict(initialize=False, coordinator_address=None, num_processes=None, process_id=None),
    ))
