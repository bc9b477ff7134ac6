"""txl_cc_ptb: the Transformer-XL baseline on Choe-Charniak actions, Penn Treebank (paper's Figure 9).

The size of tg_ptb (16 layers, d = 192, FFN 768, 8 heads, L = M = 192),
causal attention and linear relative positions:

    tgjax train --config configs/txl_cc_ptb.py:ptb/train.txt,ptb/valid.txt --workdir runs/txl_cc_ptb
"""

from tgjax.train.config import default_config, set_data_paths


def get_config(paths=None):
    config = set_data_paths(default_config(), paths)
    config.model.name = "txl_cc"
    config.model.d_model = 192
    config.model.num_layers = 16
    config.model.num_heads = 8
    config.model.ffw_hidden_size = 768
    config.model.sequence_length = 192
    config.model.memory_length = 192
    config.model.embedding_dropout = 0.3
    config.model.core_dropout = 0.19
    config.model.core_output_dropout = 0.4
    config.model.vocab_size = 23_888  # the paper's; training uses the size of the vocabulary built from the data
    config.training.num_steps = 50_000
    config.training.batch_size = 64
    config.training.lr_schedule.kwargs.max_lr = 7.1e-4
    config.training.lr_schedule.kwargs.warmup_steps = 6_000
    config.training.lr_schedule.kwargs.cosine_cycle_length = 44_000
    config.evaluation.interval_steps = 500
    config.evaluation.batch_size = 64
    config.checkpointing.interval_steps = 500
    config.logging.interval_steps = 50
    return config
