"""RL fine-tuning of a fresh controller over frozen OCN options on an unseen, longer Craft task (thesis §5.3).

    tgjax train --config configs/ocn_craft.py --workdir runs/ocn_craft                          # first: options
    tgjax train --config configs/ocn_craft_rl.py:ACD --workdir runs/ocn_rl_ACD_sparse \
        --config.rl.options_workdir=runs/ocn_craft
    tgjax train --config configs/ocn_craft_rl.py:ACD,dense --workdir runs/ocn_rl_ACD_dense \
        --config.rl.options_workdir=runs/ocn_craft
    tgjax train --config configs/ocn_craft_rl.py:ACD,cpu --workdir runs/ocn_rl_cpu \
        --config.rl.options_workdir=runs/ocn_craft_cpu                                         # docs/ocn-craft.md

PPO in option space (Algorithm 4; `tgjax.train.tasks.ppo_options`): lr
3e-4 linearly to 0, Adam, 1024 environment steps per iteration (16
environments x 64 steps), 4 epochs of 4 minibatches, clip 0.2, gamma 0.99,
GAE lambda 0.95. A MoE run's options (configs/ocn_craft.py:moe) give the MoE
baseline. Arguments, comma-separated: the task's letters (default ACD),
"dense" (reward per subtask; default sparse: only at the end), "cpu" (the
docs/ocn-craft.md's run: 60 iterations).
"""

from tgjax.envs.craft_rules import SUBTASK_LETTERS
from tgjax.train.tasks.craft_ppo import apply_config_argument
from tgjax.train.tasks.ppo_options import default_config


def get_config(arg: str | None = None):
    config = default_config()
    config.rl.options_workdir = "runs/ocn_craft"
    for word in (w.strip() for w in (arg or "").split(",") if w.strip()):
        if not apply_config_argument(config, word):
            raise ValueError(f"configs/ocn_craft_rl.py: unknown argument {word!r}; expected task letters "
                             f"({''.join(SUBTASK_LETTERS)}), 'dense' or 'cpu'")
    return config
