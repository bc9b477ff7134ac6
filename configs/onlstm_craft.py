"""onlstm_craft: an ON-LSTM language model on CRAFT's training articles, at a size a CPU trains.

CRAFT (../shared/data/craft_treebank: penn/<id>.tree, ids/craft-ids-{train,dev,test}.txt,
60 / 7 / 30 articles) is read by its id lists as configs/udgn_craft.py reads it: train = the
train ids, validation = the dev ids (`data.source = "craft"`). Words in the release's form,
the form `tgjax eval unsupervised-parse` feeds (its default `--word-form release`): only the
release's 36 word tags (punctuation, `$`, `#`, HYPH, ... dropped), lower-cased, digit runs
-> `N`, one sentence per tree, `<eos>` after each. Words seen fewer than 3 times read as
`<unk>` (`data.min_word_count`) so that `<unk>` is trained.

The paper's recipe (configs/onlstm_ptb.py) at the small CPU size of configs/onlstm_totc.py:
embedding 100, hidden 200, 3 layers [200, 200, 100], chunk 10, the paper's dropouts, SGD lr 30
with random BPTT lengths around 70, NT-ASGD with nonmono 5, validation every epoch.

    tgjax train --config configs/onlstm_craft.py --workdir runs/onlstm_craft
    tgjax eval unsupervised-parse --workdir runs/onlstm_craft \\
        $(for i in $(cat ../shared/data/craft_treebank/ids/craft-ids-test.txt); do
          echo --treebank ../shared/data/craft_treebank/penn/$i.tree; done)
"""

from pathlib import Path

import ml_collections

CRAFT = Path(__file__).resolve().parents[1].parent / "shared" / "data" / "craft_treebank"


def get_config(craft_dir: str | None = None):
    return ml_collections.ConfigDict(dict(
        trainer="onlstm_lm",
        model=dict(
            embedding_size=100, hidden_size=200, num_layers=3, chunk_size=10,
            dropout=0.45, dropout_hidden=0.3, dropout_input=0.5, dropout_embedding=0.1, weight_drop=0.45,
        ),
        data=dict(
            source="craft", craft_dir=craft_dir or str(CRAFT), train_path="", valid_path="",
            num_train_sentences=None, num_valid_sentences=None, corpus_seed=0, min_word_count=3,
            vocabulary_from="train",
        ),
        training=dict(
            batch_size=20, bptt=70, bptt_short_probability=0.05, bptt_std=5.0, min_seq_len=5,
            length_bucket=16,
            lr=30.0, weight_decay=1.2e-6, clip=0.25, alpha=2.0, beta=1.0,
            asgd=True, nonmono=5, asgd_as_released=False,
            num_epochs=40, num_steps=None, seed=141,
        ),
        evaluation=dict(every_epoch=True, interval_steps=0, batch_size=10, bptt=70),
        checkpointing=dict(interval_steps=200, max_to_keep=2, keep_best=1, async_save=True, checksums=True,
                           save_memory=True),
        logging=dict(interval_steps=20, tensorboard=True),
        mesh=dict(data=-1, model=1),
        distributed=dict(initialize=False, coordinator_address=None, num_processes=None, process_id=None),
    ))
