"""udgn_ptb: UDGN at the thesis' / release's PTB sizes (released-code.md §4.3-4.4), on user-supplied files.

PTB is not shipped: give the release's word files, one sentence per line, words
separated by spaces, punctuation and traces already removed, lower-cased, digit
runs -> N (WSJ 00-20 train, 21-22 valid):

    tgjax train --config configs/udgn_ptb.py --config.data.train_path=TRAIN --config.data.valid_path=VALID \
        --workdir runs/udgn_ptb

or a bracketed treebank per split with `--config.data.source=treebank` (the
release's WORD_TAGS filtering is then applied here). A missing file stops the
run with its path and the key to set. Sizes: nemb 512, 8 DGN layers of 8 x 128
channels, 3-layer BiLSTM parser of 512 per direction, no tag mixture (the
release; the thesis used 5 tags: `--config.model.num_tags=5`); dropout 0.2,
parser dropout 0.2, dropatt 0.1; dictionary threshold 5; mask rate 0.3; Adam
1e-3, eps 1e-9, wd 1.2e-6, clip 0.25, ReduceLROnPlateau(0.5, patience 2);
batches < 4096 tokens; seed 1111; 100 epochs (num_steps 40 000 is an estimate of
that on WSJ 00-20's ~950k words, i.e. a few hundred batches per epoch; the plateau
schedule decides the rest).
"""

import ml_collections


def get_config():
    """The sizes and recipe are `tgjax.train.tasks.mlm.default_config`'s; only the run's length differs."""
    return ml_collections.ConfigDict(dict(
        trainer="mlm",
        data=dict(craft_dir=""),
        training=dict(num_steps=40_000),
        evaluation=dict(interval_steps=400),
        checkpointing=dict(interval_steps=400),
        logging=dict(tensorboard=True),
    ))
