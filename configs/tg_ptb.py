"""tg_ptb: the paper's Transformer Grammar on the Penn Treebank (Sartran et al., 2022, Figure 9).

16 layers, d = 192, FFN 768, 8 heads, L = M = 192, batch 64 sentences, 50k
steps (6k warm-up), a word-level vocabulary built from the training trees.
The treebank is licensed: give its files (one tree per line, or .mrg)

    tgjax train --config configs/tg_ptb.py:ptb/train.txt,ptb/valid.txt --workdir runs/tg_ptb

Figure 9's text copy garbles the TG column of the PTB dropouts and maximum
learning rate; the values below are our reading (check against the PDF).
"""

from tgjax.train.config import default_config, set_data_paths


def get_config(paths=None):
    config = set_data_paths(default_config(), paths)
    config.model.d_model = 192
    config.model.num_layers = 16
    config.model.num_heads = 8
    config.model.ffw_hidden_size = 768
    config.model.sequence_length = 192
    config.model.memory_length = 192
    config.model.embedding_dropout = 0.34
    config.model.core_dropout = 0.19
    config.model.core_output_dropout = 0.45
    config.model.vocab_size = 23_888  # the paper's; training uses the size of the vocabulary built from the data
    config.training.num_steps = 50_000
    config.training.batch_size = 64
    config.training.lr_schedule.kwargs.max_lr = 7.1e-4
    config.training.lr_schedule.kwargs.warmup_steps = 6_000
    config.training.lr_schedule.kwargs.cosine_cycle_length = 44_000  # ends at min_lr at step 50k
    config.evaluation.interval_steps = 500
    config.evaluation.batch_size = 64
    config.checkpointing.interval_steps = 500
    config.logging.interval_steps = 50
    return config
