"""txl_terminals_ptb: the word-only Transformer-XL baseline, Penn Treebank (paper's Figure 9).

16 layers, d = 192, FFN 768, 8 heads, and L = M = 80 (words only, so
sequences are shorter); the trees' words are read, the brackets ignored:

    tgjax train --config configs/txl_terminals_ptb.py:ptb/train.txt,ptb/valid.txt --workdir runs/txl_terminals_ptb
"""

from tgjax.train.config import default_config, set_data_paths


def get_config(paths=None):
    config = set_data_paths(default_config(), paths)
    config.model.name = "txl_terminals"
    config.model.d_model = 192
    config.model.num_layers = 16
    config.model.num_heads = 8
    config.model.ffw_hidden_size = 768
    config.model.sequence_length = 80
    config.model.memory_length = 80
    config.model.embedding_dropout = 0.25
    config.model.core_dropout = 0.24
    config.model.core_output_dropout = 0.49
    config.model.vocab_size = 23_835  # the paper's; training uses the size of the vocabulary built from the data
    config.training.num_steps = 50_000
    config.training.batch_size = 64
    config.training.lr_schedule.kwargs.max_lr = 6.4e-4
    config.training.lr_schedule.kwargs.warmup_steps = 6_000
    config.training.lr_schedule.kwargs.cosine_cycle_length = 44_000
    config.evaluation.interval_steps = 500
    config.evaluation.batch_size = 64
    config.checkpointing.interval_steps = 500
    config.logging.interval_steps = 50
    return config
