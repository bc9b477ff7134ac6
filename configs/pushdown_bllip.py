"""pushdown_bllip: the paper's 16-layer Pushdown-LM on BLLIP-LG sentences (§4.2, Appendix A).

Appendix A: TG's BLLIP hyperparameters (configs/tg_bllip.py: d = 1024, 16
layers, 8 heads, FFN 4096, dropout 0.1, warm-up 8000 then cosine), every
layer a Pushdown layer with a depth table of 50, 300k steps, validation
every 3k, the lowest validation perplexity kept; batch 120 sentences and
clip 3 as the release. Rows hold one sentence (`<s> pieces <eos>`, at most
256 positions; longer ones are skipped and counted at setup).

BLLIP-LG is licensed: give its files (one tree per line) and, for TG's
32,768-piece SentencePiece vocabulary, its saved model (without one, a word
dictionary of the training words is built):

    tgjax train --config configs/pushdown_bllip.py:bllip/train.txt,bllip/valid.txt \\
        --config.data.vocab_path=bllip/spm.model --workdir runs/pushdown_bllip
"""

from tgjax.train.config import set_data_paths
from tgjax.train.tasks.pushdown_lm import default_config


def get_config(paths=None):
    config = set_data_paths(default_config(), paths)
    config.data.source = "treebank"
    config.model.vocab_size = 32_768  # what `tgjax info` counts with when the files are absent
    config.model.d_model = 1024
    config.model.num_layers = 16
    config.model.num_heads = 8
    config.model.ffw_hidden_size = 4096
    config.model.sequence_length = 256
    config.training.num_steps = 300_000
    config.training.batch_size = 120
    config.training.lr_schedule.kwargs.start_lr = 1e-7
    config.training.lr_schedule.kwargs.max_lr = 1.5e-4
    config.training.lr_schedule.kwargs.min_lr = 3e-7
    config.training.lr_schedule.kwargs.warmup_steps = 8_000
    config.training.lr_schedule.kwargs.cosine_cycle_length = 292_000
    config.evaluation.interval_steps = 3_000
    config.evaluation.batch_size = 120
    config.checkpointing.interval_steps = 3_000
    config.logging.interval_steps = 50
    return config
