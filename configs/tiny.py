"""tiny: a small Transformer Grammar on the built-in synthetic treebank (the default config).

Trains on 2 CPU cores in a few minutes and ends well below the unigram
model's validation loss (both printed at the end):

    tgjax train --config configs/tiny.py --workdir runs/tiny
"""

from tgjax.train.config import default_config


def get_config():
    config = default_config()
    config.training.lr_schedule.kwargs.max_lr = 2e-3
    config.evaluation.interval_steps = 250
    config.checkpointing.interval_steps = 250
    config.logging.interval_steps = 25
    return config
