"""txl_cc_bllip: the paper's Transformer-XL (CC) baseline on BLLIP-LG sentences.

The settings of tg_bllip.py (Sartran et al. (2022), Figure 9: 16 layers,
d = 1024, 251,887,616 parameters, ...) with only the model changed.
BLLIP-LG is licensed: give its files (one tree per line)

    tgjax train --config configs/txl_cc_bllip.py:bllip/train.txt,bllip/valid.txt \\
        --workdir runs/txl_cc_bllip
"""

from tgjax.train.config import load_config


def get_config(paths=None):
    config = load_config("tg_bllip" + (f":{paths}" if paths else ""))
    config.model.name = "txl_cc"
    return config
