"""pushdown_wikitrees: the paper's WikiTrees model (§4.3, App. A-B): GPT-2-small's shape, last 6 of 12 pushdown.

d = 768, 12 layers, 12 heads, FFN 3072, rows of 512 tokens; the last 6
layers are Pushdown layers. Appendix B: whole sentences packed into each
512-token window, so that windows start at sentence boundaries, with a ROOT
(`<s>`) before every sentence (`data.windows`; sentences longer than a
window are skipped and counted). Batch 480, learning rate warmed up
linearly from 0 to 6e-4 over 200 iterations then cosine; "until validation
loss stops decreasing": the lowest validation loss is kept. Add
`--config.model.dropout=0.2` for the sample-efficiency runs. Deviation:
relative positions (as every model here) instead of GPT-2's learned
absolute ones. WikiTrees (parsed Wikipedia) is not shipped: give its
bracketed files and a sub-word vocabulary (each word's pieces become a
right-branching subtree, Appendix C):

    tgjax train --config configs/pushdown_wikitrees.py:wikitrees/train.txt,wikitrees/valid.txt \\
        --config.data.vocab_path=wikitrees/spm.model --workdir runs/pushdown_wikitrees
"""

from tgjax.train.config import set_data_paths
from tgjax.train.tasks.pushdown_lm import default_config


def get_config(paths=None):
    config = set_data_paths(default_config(), paths)
    config.data.source = "treebank"
    config.data.windows = True
    config.model.vocab_size = 50_257  # GPT-2's size, what `tgjax info` counts with when the files are absent
    config.model.d_model = 768
    config.model.num_layers = 12
    config.model.num_heads = 12
    config.model.ffw_hidden_size = 3072
    config.model.sequence_length = 512
    config.model.pushdown_layers = "last:6"
    config.training.num_steps = 50_000
    config.training.batch_size = 480
    config.training.clip_grad_norm = 1.0
    config.training.optimizer.name = "adamw"
    config.training.optimizer.kwargs.eps = 1e-8
    config.training.optimizer.kwargs.weight_decay = 0.0
    config.training.lr_schedule.kwargs.max_lr = 6e-4
    config.training.lr_schedule.kwargs.warmup_steps = 200
    config.training.lr_schedule.kwargs.cosine_cycle_length = 49_800
    config.evaluation.interval_steps = 1_000
    config.evaluation.batch_size = 480
    config.checkpointing.interval_steps = 1_000
    config.logging.interval_steps = 20
    return config
