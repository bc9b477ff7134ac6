"""tg_bllip: the paper's Transformer Grammar on BLLIP-LG sentences.

Sartran et al. (2022), Figure 9: 16 layers, d = 1024, FFN 4096, 8 heads,
L = M = 256, a 32,768-piece SentencePiece vocabulary (non-terminals kept
whole), batch 176 sentences, 100k steps (8k warm-up, max LR 1.5e-4),
dropout 0.1: 251,887,616 parameters.
BLLIP-LG is licensed: give its files (one tree per line)

    tgjax train --config configs/tg_bllip.py:bllip/train.txt,bllip/valid.txt \\
        --workdir runs/tg_bllip

On a TPU pod slice add --config.distributed.initialize=true (and e.g.
--config.mesh.model=4 for model parallelism).
"""

from tgjax.train.config import default_config, set_data_paths


def get_config(paths=None):
    config = set_data_paths(default_config(), paths)
    config.model.vocab_size = 32_768  # the SentencePiece size, and the size `tgjax info` counts with
    config.model.d_model = 1024
    config.model.num_layers = 16
    config.model.num_heads = 8
    config.model.ffw_hidden_size = 4096
    config.model.sequence_length = 256
    config.model.memory_length = 256
    config.data.vocabulary = "sentencepiece"
    config.training.num_steps = 100_000
    config.training.batch_size = 176
    config.training.lr_schedule.kwargs.max_lr = 1.5e-4
    config.training.lr_schedule.kwargs.warmup_steps = 8_000
    config.training.lr_schedule.kwargs.cosine_cycle_length = 92_000  # ends at min_lr at step 100k
    config.evaluation.interval_steps = 500
    config.evaluation.batch_size = 64
    config.checkpointing.interval_steps = 500
    return config
