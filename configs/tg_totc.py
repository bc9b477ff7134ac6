"""tg_totc: a small Transformer Grammar on the Tale of Two Cities treebank, trainable on a CPU.

The treebank (6,904 / 346 / 293 sentences) sits in ../shared/data/tale_of_two_cities
beside the repository; other paths go in as `FILE.py:TRAIN,VALID`. 4 layers,
d = 128, T = M = 64 (segment and memory), batch 32, 3,000 steps (about 11
epochs of the 536,000 TG positions): 15-18 minutes on 2 CPU cores. Words
seen once in training become UNK (`data.min_word_count = 2`), so that UNK is
trained for the unseen words of the test split.

    tgjax train --config configs/tg_totc.py --workdir runs/tg_totc
    tgjax eval parse --workdir runs/tg_totc --treebank ../shared/data/tale_of_two_cities/test.txt

`--config.model.name=txl_cc` (or `txl_terminals`) trains the baselines with
the same settings.
"""

from pathlib import Path

from tgjax.train.config import default_config, set_data_paths

TREEBANK = Path(__file__).resolve().parents[1].parent / "shared" / "data" / "tale_of_two_cities"


def get_config(paths=None):
    default = f"{TREEBANK / 'train.txt'},{TREEBANK / 'valid.txt'}"
    config = set_data_paths(default_config(), paths or default)
    config.model.d_model = 128
    config.model.num_layers = 4
    config.model.ffw_hidden_size = 512
    config.model.embedding_dropout = 0.2
    config.model.core_dropout = 0.2
    config.model.core_output_dropout = 0.3
    config.data.min_word_count = 2
    config.training.num_steps = 3_000
    config.training.batch_size = 32
    config.training.lr_schedule.kwargs.warmup_steps = 200
    config.training.lr_schedule.kwargs.cosine_cycle_length = 2_800
    config.evaluation.interval_steps = 250
    config.checkpointing.interval_steps = 250
    config.logging.interval_steps = 25
    return config
