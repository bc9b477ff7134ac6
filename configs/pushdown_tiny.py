"""pushdown_tiny: a small Pushdown-LM on the built-in synthetic treebank; CPU minutes.

Every layer a Pushdown layer (d 64, 2 layers, 4 heads, FFN 256), rows of one
sentence (`<s> w_1 .. w_n <eos>`, at most 31 words), the paper's attachment
softmax over the legal slots, LM + attachment loss (weight 1); Adam after
clipping at 3 (the release), warm-up then cosine, at a rate a tiny model
can take (2e-3, as configs/tiny.py's TG).

    tgjax train --config configs/pushdown_tiny.py --workdir runs/pushdown_tiny
    tgjax train --config configs/pushdown_tiny.py --config.model.pushdown_layers=none \\
        --workdir runs/pushdown_tiny_base                        # Base-LM with the attachment head
"""

from tgjax.train.tasks.pushdown_lm import default_config


def get_config():
    config = default_config()
    config.model.sequence_length = 32  # the built-in sentences have at most 30 words: <s> + 30 + <eos> = 32
    config.training.lr_schedule.kwargs.start_lr = 1e-7
    config.training.lr_schedule.kwargs.max_lr = 2e-3
    config.training.lr_schedule.kwargs.min_lr = 1e-5
    return config
