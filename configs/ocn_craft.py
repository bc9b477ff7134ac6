"""Option-Controller Network behaviour cloning on Craft, the thesis' recipe (thesis §5.3; released-code.md §5.3).

    tgjax train --config configs/ocn_craft.py --workdir runs/ocn_craft
    tgjax train --config configs/ocn_craft.py:moe --workdir runs/moe_craft      # baseline: options run one step
    tgjax train --config configs/ocn_craft.py:lstm --workdir runs/lstm_craft    # baseline: a flat LSTM policy
    tgjax train --config configs/ocn_craft.py:ompn --workdir runs/ompn_craft    # baseline: OMPN, 3 memory slots
    tgjax train --config configs/ocn_craft.py:cpu --workdir runs/ocn_craft_cpu  # docs/ocn-craft.md's CPU scale
    tgjax train --config configs/ocn_craft.py:mid --workdir runs/ocn_craft_mid  # docs/ocn-craft.md's mid CPU scale
    tgjax eval craft --workdir runs/ocn_craft                                   # metrics, option x subtask table

Setting S1 (the task sets were lost in the thesis' text; ours, documented in
docs/ocn-craft.md): one controller and K = 3 options imitate the bot on the short
tasks AC, CD, DA (A = get wood, C = get iron, D = get grass), 6000
demonstrations each (80/20 train/validation), hidden 128, cell depth 2,
controller temperature 10, Adam lr 1e-3, batch 512. The demonstrations are
made with the bot into WORKDIR/demos on first use (`data.generate`). The
bot's final DONE is read but not imitated (the thesis' actions are up, down,
left, right and use; the environment ends the task);
`--config.data.train_final_done=True` imitates it, as OMPN's release does
(docs/ocn-craft.md compares the two).
Arguments, comma-separated: "moe", "lstm" or "ompn" (the baselines, same
recipe; OMPN with n = 3 slots of size H, released-code.md §5.7);
"cpu" (docs/ocn-craft.md's first run: 400 demonstrations per task, batch 64, 600
steps); "mid" (docs/ocn-craft.md's second: the thesis' 6000 demonstrations per
task, batch 128, up to 6000 steps, validation on 600 held-out episodes,
200 of each task, every 250 steps).
"""

from tgjax.train.tasks.craft_bc import default_config

BASELINES = ("moe", "lstm", "ompn")
VARIANTS = (*BASELINES, "cpu", "mid")


def get_config(arg: str | None = None):
    config = default_config()
    words = [w.strip() for w in (arg or "").split(",") if w.strip()]
    unknown = [w for w in words if w not in VARIANTS]
    if unknown:
        raise ValueError(f"configs/ocn_craft.py: unknown argument(s) {unknown}; expected any of {VARIANTS}")
    chosen = [w for w in BASELINES if w in words]
    if len(chosen) > 1:
        raise ValueError(f"configs/ocn_craft.py: {' and '.join(repr(w) for w in chosen)} are different baselines; "
                         f"pick one")
    for kind in BASELINES:
        if kind in words:
            config.model.kind = kind
    if "cpu" in words:
        config.data.num_demos = 400
        config.training.batch_size = 64
        config.training.num_steps = 600
        config.evaluation.interval_steps = config.checkpointing.interval_steps = 150
        config.evaluation.batch_size = 80
        config.logging.interval_steps = 10
    if "mid" in words:
        if "cpu" in words:
            raise ValueError("configs/ocn_craft.py: 'cpu' and 'mid' are two scales; pick one")
        config.training.batch_size = 128
        config.training.num_steps = 6000
        config.evaluation.interval_steps = config.checkpointing.interval_steps = 250
        config.evaluation.batch_size = 200
        config.evaluation.max_episodes = 600
        config.logging.interval_steps = 10
    return config
