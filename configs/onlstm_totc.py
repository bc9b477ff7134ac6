"""onlstm_totc: an ON-LSTM language model on the words of Tale of Two Cities, at a size a CPU trains.

The treebank (6,904 / 346 / 293 sentences, about 150k / 8k words) sits in
../shared/data/tale_of_two_cities beside the repository; the words are the
trees' leaves, one sentence per tree, `<eos>` after each (punctuation kept, as
in Mikolov's PTB LM files it is not: these are the treebank's tokens).
Words seen once in training read as `<unk>` (`data.min_word_count = 2`) so
that the unseen words of validation have a trained class.

The paper's recipe (`tgjax.train.tasks.onlstm_lm.default_config`, which
configs/onlstm_ptb.py runs as it is) at a CPU scale: 3 layers [200 ->
400 -> 400 -> 200], chunk 10, the paper's dropouts, SGD lr 30 with the random
BPTT lengths around 70, NT-ASGD with nonmono 5, validation every epoch.
Other files: `--config configs/onlstm_totc.py:TRAIN,VALID`.

    tgjax train --config configs/onlstm_totc.py --workdir runs/onlstm_totc
"""

from pathlib import Path

from tgjax.train.tasks.onlstm_lm import default_config

TREEBANK = Path(__file__).resolve().parents[1].parent / "shared" / "data" / "tale_of_two_cities"


def get_config(paths: str | None = None):
    train_path, valid_path = (paths.split(",") if paths else (str(TREEBANK / "train.txt"),
                                                              str(TREEBANK / "valid.txt")))
    config = default_config()
    config.model.embedding_size, config.model.hidden_size = 200, 400
    d = config.data
    d.source, d.train_path, d.valid_path, d.min_word_count = "treebank", train_path, valid_path, 2
    config.training.num_epochs = 40
    config.checkpointing.interval_steps = 500
    config.logging.interval_steps = 20
    return config
