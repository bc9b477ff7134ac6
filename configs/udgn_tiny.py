"""udgn_tiny: a small UDGN masked LM on the built-in treebank; trains in under a minute on 2 CPU cores.

The release's recipe (configs/udgn_ptb.py) at toy sizes: d 32, 2 DGN layers of
4 x 16 channels, a 1-layer BiLSTM parser of 32 per direction, no tag mixture
(the release's default), mask rate 0.3 with every masked token -> `<mask>`,
Adam lr 3e-3 (eps 1e-9, wd 1.2e-6), clip 0.25, plateau halving; token-budget
batches of <= 512 tokens (the release: 4096). Words: the release's WORD_TAGS
(the final `.` dropped), lower-cased.

    tgjax train --config configs/udgn_tiny.py --workdir runs/udgn_tiny
    tgjax eval dependency --workdir runs/udgn_tiny --treebank builtin
"""

import ml_collections


def get_config():
    """What differs from `tgjax.train.tasks.mlm.default_config` (the release's PTB recipe)."""
    return ml_collections.ConfigDict(dict(
        trainer="mlm",
        model=dict(d_model=32, num_layers=2, num_channels=4, channel_size=16, parser_hidden=32, parser_layers=1,
                   dropout=0.1, parser_dropout=0.1),
        data=dict(source="builtin", craft_dir="", num_train_sentences=2000, num_valid_sentences=200,
                  min_word_count=1),
        training=dict(num_steps=600, token_budget=512, learning_rate=3e-3),
        evaluation=dict(interval_steps=100),
        checkpointing=dict(interval_steps=100),
        logging=dict(interval_steps=20),
    ))
