"""onlstm_ptb: the ON-LSTM language model of Shen et al. (ICLR 2019) on Mikolov's Penn Treebank, the paper's recipe.

3 layers [400 -> 1150 -> 1150 -> 400], chunk 10, tied decoder; dropouts
(output 0.45, between layers 0.3, input 0.5, embedding 0.1, DropConnect 0.45);
AR 2, TAR 1; SGD lr 30, weight decay 1.2e-6, clip 0.25, batch 20, BPTT 70 with
the release's random lengths; NT-ASGD with nonmono 5; 1000 epochs; validation
batch 10 every epoch (released-code.md §2.3). The release reports test
perplexity 56.17 (val 58.29).

The PTB files are licensed and not shipped: point the config at a directory
holding Mikolov's `train.txt` and `valid.txt` (one sentence per line, `<unk>`
already in place):

    tgjax train --config configs/onlstm_ptb.py:/path/to/penn --workdir runs/onlstm_ptb

or set `data.train_path=... data.valid_path=...` on the command line. A
missing file stops the run before anything starts, naming the key.
"""

from tgjax.train.tasks.onlstm_lm import default_config


def get_config(data_dir: str | None = None):
    config = default_config()  # the release's PTB recipe, all of it
    if data_dir:
        config.data.train_path = f"{data_dir.rstrip('/')}/train.txt"
        config.data.valid_path = f"{data_dir.rstrip('/')}/valid.txt"
    config.data.vocabulary_from = "all"  # the release's dictionary covers every split
    return config
