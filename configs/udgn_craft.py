"""udgn_craft: a UDGN masked LM on CRAFT's training articles, at a size 2 CPU cores train in minutes.

CRAFT (../shared/data/craft_treebank: penn/<id>.tree, ids/craft-ids-{train,dev,test}.txt,
60 / 7 / 30 articles) is read by its id lists: train = the train ids, validation = the dev ids.
Words: the release's WORD_TAGS only (punctuation, traces, `$`, `#` dropped), lower-cased,
digit runs -> N; words seen fewer than 3 times read as `<unk>` (the release: 5 on PTB).
The release's recipe (mask 0.3, Adam 1e-3 eps 1e-9 wd 1.2e-6, clip 0.25, plateau halving,
dropouts 0.2 / 0.1 / 0.2) at the size a shared 2-core CPU trains in ~15 minutes: d 64, 2 DGN
layers of 8 x 16 channels, a 1-layer BiLSTM parser of 64 (the release: 512, 8 layers of
8 x 128, 3 x 512), batches of <= 2048 tokens (the release: 4096), sentences of <= 48 words
(3.6% of the training sentences dropped, counted; the release keeps all) so that three widths
compile. The test (`tgjax eval dependency`) reads every sentence.

    tgjax train --config configs/udgn_craft.py --workdir runs/udgn_craft
    tgjax train --config configs/udgn_craft.py:cpu_long --workdir runs/udgn_craft_long
    tgjax eval dependency --workdir runs/udgn_craft --craft test

Argument "cpu_long": the same model with twice the updates per epoch (batches of
<= 1024 tokens), sentences of <= 40 words, validation on 2 maskings every 400 steps
and 20,000 steps: a run meant to be stopped (SIGTERM) when the CPU share runs out,
its best checkpoint then scored.
"""

import ml_collections


def get_config(arg: str | None = None):
    config = _release_recipe_at_cpu_size()
    if arg == "cpu_long":
        config.data.max_length = 40
        config.training.token_budget = 1024
        config.training.num_steps = 20_000
        config.evaluation.interval_steps = config.checkpointing.interval_steps = 400
        config.evaluation.runs = 2
    elif arg:
        raise ValueError(f"configs/udgn_craft.py takes no argument or 'cpu_long', got {arg!r}")
    return config


def _release_recipe_at_cpu_size():
    """What differs from `tgjax.train.tasks.mlm.default_config` (the release's recipe; CRAFT in its default
    place, `data.craft_dir`)."""
    return ml_collections.ConfigDict(dict(
        trainer="mlm",
        model=dict(d_model=64, num_layers=2, channel_size=16, parser_hidden=64, parser_layers=1),
        data=dict(source="craft", min_word_count=3, max_length=48),
        training=dict(num_steps=3000, token_budget=2048, length_bucket=16),
        evaluation=dict(interval_steps=200),
        checkpointing=dict(interval_steps=200),
        logging=dict(interval_steps=25),
    ))
