"""Ordered Memory on logical inference (Bowman et al. 2015 data), the release's recipe (released-code.md §3.4).

    tgjax train --config configs/om_logic.py --workdir runs/om_logic                      # test per 7..12 operators
    tgjax train --config configs/om_logic.py --config.data.split=A --workdir runs/om_logic_a   # systematicity A (B, C)
    tgjax train --config configs/om_logic.py:cpu --workdir runs/om_logic_cpu             # the first CPU-scale run
    tgjax train --config configs/om_logic.py:cpu_long --workdir runs/om_logic_cpu_long   # the README's CPU scale

Model: Embedding(12, 200, U(+-0.1)) -> Dropout(0.1) -> OM(200, 200, 12 slots;
24 at test, as the release doubles them) on premise and hypothesis, then
[u; v; u*v; |u-v|] -> Dropout(0.3) -> Linear(800 -> 200) -> ELU -> Dropout(0.3)
-> Linear(200 -> 7), 1,246,808 parameters; dropout 0.2, dropoutm 0.2. Adam (1e-3, betas (0, 0.999),
eps 1e-9, weight decay 1.2e-6), clip 1, batch 128, ReduceLROnPlateau(max, 0.5,
patience 2) on validation accuracy (every 10th training pair held out), 50
epochs (121,977 pairs / 128 = 953 steps an epoch). Data: ../shared/data/
ordered_memory/propositionallogic (`data.logic_dir`). Arguments: "cpu" = the
small run of the README (D = 48, a 30k-pair training subset, 800 steps of
64 pairs); "cpu_long" = a recipe for a longer run on a shared CPU: the whole
training split (no subset: the run sees each pair about once, so more data
beats repeats), D = 48, batch 64, learning rate 2e-3 and the dropouts halved
(a short run underfits; a 64-pair overfit check reaches loss 7e-4 in 150
steps without dropout, so the model itself learns), evaluation every 500 steps.
"""

from tgjax.train.tasks.classification import default_config


def get_config(arg: str | None = None):
    config = default_config()
    config.dataset = "logic"
    config.data.split = "length"
    m = config.model
    m.embedding_size = m.slot_size = m.mlp_hidden_size = 200
    m.n_slots, m.test_n_slots = 12, 24
    m.embedding_dropout, m.output_dropout, m.attention_dropout, m.cell_dropout = 0.1, 0.3, 0.2, 0.2
    m.embedding_init_range = 0.1
    config.training.num_steps = 47_650
    config.evaluation.interval_steps = config.checkpointing.interval_steps = 953
    if arg == "cpu":
        config.data.max_train_examples = 30_000
        config.data.max_valid_examples = 2_000
        m.embedding_size = m.slot_size = m.mlp_hidden_size = 48
        config.training.batch_size = 64
        config.training.num_steps = 800
        config.evaluation.interval_steps = config.checkpointing.interval_steps = 200
        config.evaluation.batch_size = 256
        config.logging.interval_steps = 25
    elif arg == "cpu_long":
        config.data.max_valid_examples = 2_000
        m.embedding_size = m.slot_size = m.mlp_hidden_size = 48
        m.embedding_dropout, m.output_dropout, m.attention_dropout, m.cell_dropout = 0.05, 0.15, 0.1, 0.1
        config.training.batch_size = 64
        config.training.learning_rate = 2e-3
        config.training.num_steps = 4_000
        config.evaluation.interval_steps = config.checkpointing.interval_steps = 500
        config.evaluation.batch_size = 256
        config.logging.interval_steps = 50
    elif arg:
        raise ValueError(f"configs/om_logic.py takes no argument, 'cpu' or 'cpu_long', got {arg!r}")
    return config
