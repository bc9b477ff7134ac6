"""udgn_tiny: a small UDGN masked LM on the built-in treebank; trains in under a minute on 2 CPU cores.

The release's recipe (configs/udgn_ptb.py) at toy sizes: d 32, 2 DGN layers of
4 x 16 channels, a 1-layer BiLSTM parser of 32 per direction, no tag mixture
(the release's default), mask rate 0.3 with every masked token -> `<mask>`,
Adam lr 1e-3 (eps 1e-9, wd 1.2e-6), clip 0.25, plateau halving; token-budget
batches of <= 512 tokens (the release: 4096). Words: the release's WORD_TAGS
(the final `.` dropped), lower-cased.

    tgjax train --config configs/udgn_tiny.py --workdir runs/udgn_tiny
    tgjax eval dependency --workdir runs/udgn_tiny --treebank builtin
"""

import ml_collections


def get_config():
    return ml_collections.ConfigDict(dict(
        trainer="mlm",
        model=dict(d_model=32, num_layers=2, num_channels=4, channel_size=16, parser_hidden=32,
                   parser_layers=1, num_tags=0, dropout=0.1, attention_dropout=0.1, parser_dropout=0.1),
        data=dict(source="builtin", train_path="", valid_path="", test_path="", craft_dir="",
                  num_train_sentences=2000, num_valid_sentences=200, num_test_sentences=None, corpus_seed=0,
                  min_word_count=1, max_length=0),
        training=dict(num_steps=600, token_budget=512, length_bucket=8, mask_rate=0.3, seed=1111,
                      learning_rate=3e-3, b1=0.9, b2=0.999, eps=1e-9, weight_decay=1.2e-6, clip=0.25,
                      schedule="plateau", lr_decay=0.5, lr_patience=3, early_stopping_patience=1_000_000),
        evaluation=dict(interval_steps=100, runs=5, seed=0),
        checkpointing=dict(interval_steps=100, max_to_keep=2, keep_best=1, async_save=True, checksums=True,
                           save_memory=False),
        logging=dict(interval_steps=20, tensorboard=False),
        mesh=dict(data=-1, model=1),
        distributed=dict(initialize=False, coordinator_address=None, num_processes=None, process_id=None),
    ))
