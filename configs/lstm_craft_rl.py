"""RL fine-tuning of a flat baseline (LSTM or OMPN) in action space on an unseen, longer Craft task (thesis §5.3).

    tgjax train --config configs/ocn_craft.py:lstm --workdir runs/lstm_craft                   # first: imitation
    tgjax train --config configs/lstm_craft_rl.py:ACD --workdir runs/lstm_rl_ACD_sparse
    tgjax train --config configs/lstm_craft_rl.py:ACD,dense --workdir runs/lstm_rl_ACD_dense
    tgjax train --config configs/ocn_craft.py:ompn --workdir runs/ompn_craft
    tgjax train --config configs/lstm_craft_rl.py:ACD,ompn --workdir runs/ompn_rl_ACD_sparse    # OMPN baseline
    tgjax train --config configs/lstm_craft_rl.py:ACD,cpu --workdir runs/lstm_rl_cpu \
        --config.rl.policy_workdir=runs/lstm_craft_cpu                                        # docs/ocn-craft.md
    tgjax train --config configs/lstm_craft_rl.py:ACD --workdir runs/lstm_rl_fresh \
        --config.rl.policy_workdir=                                                            # a fresh LSTM

PPO in action space (`tgjax.train.tasks.ppo_actions`): the behaviour-cloned
policy of `rl.policy_workdir` (default runs/lstm_craft, or runs/ompn_craft
with "ompn"), with a linear value head, fine-tuned whole; the same PPO
settings as configs/ocn_craft_rl.py (lr 3e-4 linearly to 0, Adam, 1024
environment steps per iteration = 16 environments x 64 steps, 4 epochs of
4 minibatches, clip 0.2, gamma 0.99, GAE lambda 0.95). With
`--config.rl.policy_workdir=` a fresh policy of `model.kind` is trained
instead. Arguments, comma-separated: the task's letters (default ACD),
"dense" (reward per subtask; default sparse: only at the end), "ompn"
(fine-tune an OMPN run; a fresh policy is then OMPN too), "cpu" (the
docs/ocn-craft.md's scale: 60 iterations).
"""

from tgjax.envs.craft_rules import SUBTASK_LETTERS
from tgjax.train.tasks.craft_ppo import apply_config_argument
from tgjax.train.tasks.ppo_actions import default_config


def get_config(arg: str | None = None):
    config = default_config()
    config.rl.policy_workdir = "runs/lstm_craft"
    for word in (w.strip() for w in (arg or "").split(",") if w.strip()):
        if word == "ompn":
            config.rl.policy_workdir = "runs/ompn_craft"
            config.model.kind = "ompn"
        elif not apply_config_argument(config, word):
            raise ValueError(f"configs/lstm_craft_rl.py: unknown argument {word!r}; expected task letters "
                             f"({''.join(SUBTASK_LETTERS)}), 'dense', 'ompn' or 'cpu'")
    return config
