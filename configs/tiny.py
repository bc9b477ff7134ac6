"""tiny: a small Transformer Grammar on the built-in synthetic treebank (the default config).

Trains on 2 CPU cores in a few minutes and ends well below the unigram
model's validation loss (both printed at the end):

    tgjax train --config configs/tiny.py --workdir runs/tiny
"""

from tgjax.train.config import default_config


def get_config():
    config = default_config()
    config.model.name = "tg"
    config.model.d_model = 64
    config.model.num_layers = 2
    config.model.num_heads = 4
    config.model.ffw_hidden_size = 256
    config.model.sequence_length = 64
    config.model.memory_length = 64
    config.model.embedding_dropout = 0.1
    config.model.core_dropout = 0.1
    config.model.core_output_dropout = 0.1
    config.data.train_path = "builtin"
    config.data.valid_path = "builtin"
    config.training.num_steps = 1000
    config.training.batch_size = 16
    config.training.lr_schedule.kwargs.max_lr = 2e-3
    config.training.lr_schedule.kwargs.warmup_steps = 100
    config.training.lr_schedule.kwargs.cosine_cycle_length = 900
    config.evaluation.interval_steps = 250
    config.checkpointing.interval_steps = 250
    config.logging.interval_steps = 25
    return config
