"""onlstm_tiny: a small ON-LSTM language model on the built-in treebank's sentences; trains in seconds on a CPU.

The paper's recipe (configs/onlstm_ptb.py) at toy sizes: 2 layers [32 -> 64 ->
32], chunk 8, the same dropouts scaled down, SGD lr 30 with the random BPTT
lengths around 20, NT-ASGD with nonmono 1 so that the switch can happen
within the run, validation every epoch. Two layers, not the paper's three: at
these widths, with the release's initialisation and plain SGD, a third layer
shrinks the signal so much (layer outputs of std ~0.03, layer-0 gradients 60x
smaller than the top layer's) that a 3-layer model stayed at the unigram
perplexity for 12 epochs, where 2 layers reach about half of it in 4.

    tgjax train --config configs/onlstm_tiny.py --workdir runs/onlstm_tiny
"""

import ml_collections


def get_config():
    return ml_collections.ConfigDict(dict(
        trainer="onlstm_lm",
        model=dict(
            embedding_size=32, hidden_size=64, num_layers=2, chunk_size=8,
            dropout=0.2, dropout_hidden=0.1, dropout_input=0.2, dropout_embedding=0.05, weight_drop=0.2,
        ),
        data=dict(
            source="builtin", train_path="builtin", valid_path="builtin",
            num_train_sentences=2000, num_valid_sentences=200, corpus_seed=0, min_word_count=1,
            vocabulary_from="train",
        ),
        training=dict(
            batch_size=16, bptt=20, bptt_short_probability=0.05, bptt_std=5.0, min_seq_len=5,
            length_bucket=48,  # every segment of this recipe fits in 48 steps: one compiled shape
            lr=30.0, weight_decay=1.2e-6, clip=0.25, alpha=2.0, beta=1.0,
            asgd=True, nonmono=1, asgd_as_released=False,
            num_epochs=4, num_steps=None, seed=141,
        ),
        evaluation=dict(every_epoch=True, interval_steps=0, batch_size=10, bptt=40),
        checkpointing=dict(interval_steps=100, max_to_keep=2, keep_best=1, async_save=True, checksums=True,
                           save_memory=True),
        logging=dict(interval_steps=10, tensorboard=False),
        mesh=dict(data=-1, model=1),
        distributed=dict(initialize=False, coordinator_address=None, num_processes=None, process_id=None),
    ))
