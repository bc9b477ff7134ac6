"""onlstm_ptb: the ON-LSTM language model of Shen et al. (ICLR 2019) on Mikolov's Penn Treebank, the paper's recipe.

3 layers [400 -> 1150 -> 1150 -> 400], chunk 10, tied decoder; dropouts
(output 0.45, between layers 0.3, input 0.5, embedding 0.1, DropConnect 0.45);
AR 2, TAR 1; SGD lr 30, weight decay 1.2e-6, clip 0.25, batch 20, BPTT 70 with
the release's random lengths; NT-ASGD with nonmono 5; 1000 epochs; validation
batch 10 every epoch (released-code.md §2.3). The release reports test
perplexity 56.17 (val 58.29).

The PTB files are licensed and not shipped: point the config at a directory
holding Mikolov's `train.txt` and `valid.txt` (one sentence per line, `<unk>`
already in place):

    tgjax train --config configs/onlstm_ptb.py:/path/to/penn --workdir runs/onlstm_ptb

or set `data.train_path=... data.valid_path=...` on the command line. A
missing file stops the run before anything starts, naming the key.
"""

import ml_collections


def get_config(data_dir: str | None = None):
    train_path = f"{data_dir.rstrip('/')}/train.txt" if data_dir else ""
    valid_path = f"{data_dir.rstrip('/')}/valid.txt" if data_dir else ""
    return ml_collections.ConfigDict(dict(
        trainer="onlstm_lm",
        model=dict(
            embedding_size=400, hidden_size=1150, num_layers=3, chunk_size=10,
            dropout=0.45, dropout_hidden=0.3, dropout_input=0.5, dropout_embedding=0.1, weight_drop=0.45,
        ),
        data=dict(
            source="text", train_path=train_path, valid_path=valid_path,
            num_train_sentences=None, num_valid_sentences=None, corpus_seed=0, min_word_count=1,
            vocabulary_from="all",  # the release's dictionary covers every split
        ),
        training=dict(
            batch_size=20, bptt=70, bptt_short_probability=0.05, bptt_std=5.0, min_seq_len=5,
            length_bucket=16,  # pad segments to a multiple of 16 steps: a few compiled shapes
            lr=30.0, weight_decay=1.2e-6, clip=0.25, alpha=2.0, beta=1.0,
            asgd=True, nonmono=5, asgd_as_released=False,
            num_epochs=1000, num_steps=None, seed=141,
        ),
        evaluation=dict(every_epoch=True, interval_steps=0, batch_size=10, bptt=70),
        checkpointing=dict(interval_steps=1000, max_to_keep=2, keep_best=1, async_save=True, checksums=True,
                           save_memory=True),
        logging=dict(interval_steps=200, tensorboard=True),
        mesh=dict(data=-1, model=1),
        distributed=dict(initialize=False, coordinator_address=None, num_processes=None, process_id=None),
    ))
