"""Ordered Memory on logical inference (Bowman et al. 2015 data), the release's recipe (released-code.md §3.4).

    tgjax train --config configs/om_logic.py --workdir runs/om_logic                      # test per 7..12 operators
    tgjax train --config configs/om_logic.py --config.data.split=A --workdir runs/om_logic_a   # systematicity A (B, C)
    tgjax train --config configs/om_logic.py:cpu --workdir runs/om_logic_cpu             # the first CPU-scale run
    tgjax train --config configs/om_logic.py:cpu_long --workdir runs/om_logic_cpu_long   # the docs' CPU scale
    tgjax train --config configs/om_logic.py:thesis --workdir runs/om_logic_thesis       # the thesis' recurrence

The recurrence is the release's (`model.release_switches=True`): LayerNorms
on the pointer scorer's query and key, mask entries below 1e-5 zeroed,
padded steps zeroed (`tgjax.ops.ordered_memory.RELEASE`). The thesis' numbers
came from that code, so this is the form that reproduces them. The argument
"thesis" (alone or after "cpu" / "cpu_long": `:cpu_long,thesis`) selects the
thesis' equations instead (`model.release_switches=False`: no query/key
LayerNorms, no floor, padding carries the state), 800 parameters fewer.

The systematicity splits are scored on every unseen test pair (0-12
operators) and on those with 7-12 operators, the lengths the thesis
aggregates (`tgjax.train.tasks.classification`); the results put the latter
beside the thesis.

Model: Embedding(12, 200, U(+-0.1)) -> Dropout(0.1) -> OM(200, 200, 12 slots;
24 at test, as the release doubles them) on premise and hypothesis, then
[u; v; u*v; |u-v|] -> Dropout(0.3) -> Linear(800 -> 200) -> ELU -> Dropout(0.3)
-> Linear(200 -> 7), 1,247,608 parameters (1,246,808 in the thesis form); dropout 0.2, dropoutm 0.2.
Adam (1e-3, betas (0, 0.999),
eps 1e-9, weight decay 1.2e-6), clip 1, batch 128, ReduceLROnPlateau(max, 0.5,
patience 2) on validation accuracy (every 10th training pair held out), 50
epochs (121,977 pairs / 128 = 953 steps an epoch). Data: ../shared/data/
ordered_memory/propositionallogic (`data.logic_dir`). Arguments: "cpu" = the
small run of docs/onlstm-ordered-memory.md (D = 48, a 30k-pair training subset, 800 steps of
64 pairs); "cpu_long" = a recipe for a longer run on a shared CPU: the whole
training split (no subset: the run sees each pair about once, so more data
beats repeats), D = 48, batch 64, learning rate 2e-3 and the dropouts halved
(a short run underfits; a 64-pair overfit check reaches loss 7e-4 in 150
steps without dropout, so the model itself learns), evaluation every 500 steps.
"""

from tgjax.train.tasks.classification import default_config


def get_config(arg: str | None = None):
    config = default_config()
    options = set(arg.split(",")) if arg else set()
    if not options <= {"cpu", "cpu_long", "thesis"} or {"cpu", "cpu_long"} <= options:
        raise ValueError("configs/om_logic.py takes no argument, or 'cpu' or 'cpu_long', each alone or with "
                         f"',thesis', or 'thesis', got {arg!r}")
    config.dataset = "logic"
    m = config.model
    m.embedding_size = m.slot_size = m.mlp_hidden_size = 200
    m.n_slots, m.test_n_slots = 12, 24
    m.embedding_dropout, m.output_dropout, m.attention_dropout, m.cell_dropout = 0.1, 0.3, 0.2, 0.2
    m.embedding_init_range = 0.1
    m.release_switches = "thesis" not in options  # the release's recurrence reproduces the thesis' table
    config.training.num_steps = 47_650
    config.evaluation.interval_steps = config.checkpointing.interval_steps = 953
    if "cpu" in options:
        config.data.max_train_examples = 30_000
        config.data.max_valid_examples = 2_000
        m.embedding_size = m.slot_size = m.mlp_hidden_size = 48
        config.training.batch_size = 64
        config.training.num_steps = 800
        config.evaluation.interval_steps = config.checkpointing.interval_steps = 200
        config.evaluation.batch_size = 256
        config.logging.interval_steps = 25
    elif "cpu_long" in options:
        config.data.max_valid_examples = 2_000
        m.embedding_size = m.slot_size = m.mlp_hidden_size = 48
        m.embedding_dropout, m.output_dropout, m.attention_dropout, m.cell_dropout = 0.05, 0.15, 0.1, 0.1
        config.training.batch_size = 64
        config.training.learning_rate = 2e-3
        config.training.num_steps = 4_000
        config.evaluation.interval_steps = config.checkpointing.interval_steps = 500
        config.evaluation.batch_size = 256
        config.logging.interval_steps = 50
    return config
