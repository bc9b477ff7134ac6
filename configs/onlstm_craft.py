"""onlstm_craft: an ON-LSTM language model on CRAFT's training articles, at a size a CPU trains.

CRAFT (../shared/data/craft_treebank: penn/<id>.tree, ids/craft-ids-{train,dev,test}.txt,
60 / 7 / 30 articles) is read by its id lists as configs/udgn_craft.py reads it: train = the
train ids, validation = the dev ids (`data.source = "craft"`). Words in the release's form,
the form `tgjax eval unsupervised-parse` feeds (its default `--word-form release`): only the
release's 36 word tags (punctuation, `$`, `#`, HYPH, ... dropped), lower-cased, digit runs
-> `N`, one sentence per tree, `<eos>` after each. Words seen fewer than 3 times read as
`<unk>` (`data.min_word_count`) so that `<unk>` is trained.

The paper's recipe (`tgjax.train.tasks.onlstm_lm.default_config`, which
configs/onlstm_ptb.py runs as it is) at the small CPU size of configs/onlstm_totc.py:
embedding 100, hidden 200, 3 layers [200, 200, 100], chunk 10, the paper's dropouts, SGD lr 30
with random BPTT lengths around 70, NT-ASGD with nonmono 5, validation every epoch.

    tgjax train --config configs/onlstm_craft.py --workdir runs/onlstm_craft
    tgjax eval unsupervised-parse --workdir runs/onlstm_craft \\
        $(for i in $(cat ../shared/data/craft_treebank/ids/craft-ids-test.txt); do
          echo --treebank ../shared/data/craft_treebank/penn/$i.tree; done)
"""

from pathlib import Path

from tgjax.train.tasks.onlstm_lm import default_config

CRAFT = Path(__file__).resolve().parents[1].parent / "shared" / "data" / "craft_treebank"


def get_config(craft_dir: str | None = None):
    config = default_config()
    config.model.embedding_size, config.model.hidden_size = 100, 200
    config.data.source, config.data.craft_dir, config.data.min_word_count = "craft", craft_dir or str(CRAFT), 3
    config.training.num_epochs = 40
    config.checkpointing.interval_steps = 200
    config.logging.interval_steps = 20
    return config
