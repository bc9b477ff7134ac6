"""pushdown_dyck: the paper's Dyck experiment (§4.1, Table 1): 6-layer LMs, d = 128, on 100k Dyck_(20,10) strings.

The release's recipe (released-code.md §1.6): every layer a Pushdown layer
with the binary "has been reduced" tape, dropout 0.1 in the layers (no
embedding dropout), Adam (lr 1e-4, eps 1e-7), clip 3, linear warm-up over
8000 of 10 000 steps then cosine to 0, batch 64 strings, seed 42. The
release's encoder has 8 heads of 16 and FFN 512 whatever its CLI says
(quirk A); those are the sizes here, and its attachment head's depth
embedding is d / 4 = 32 wide. Strings longer than 510 brackets are
redrawn (counted at setup), so every string fits a row of 512.

The attachment head is the release's, since Table 1 came from the release:
scores without 1/sqrt(d), k_self from the transformed query, the relative
position term, and the softmax over every causal slot (`model.head_scaled=
False`, `head_self_key_input="query"`, `head_relative_positions=True`,
`attachment_normalise="causal"`; the paper's Fig. 8 normalises the same
way). The paper's head (Fig. 8's scores, its text's softmax over the legal
slots; `tgjax.nn.attachment_head`) is the other column: append
`-paper-head` to any variant (`:paper-head`, `:base-paper-head`,
`:cpu-paper-head`, `:base-cpu-paper-head`).

Base-LM (§4.1 insists on it): the same model with no pushdown layer, still
trained with the attachment head as a multi-task loss:

    tgjax train --config configs/pushdown_dyck.py --workdir runs/pushdown_dyck
    tgjax train --config configs/pushdown_dyck.py:base --workdir runs/base_dyck
    (or --config.model.pushdown_layers=none)

Relative positions are not clipped before the longest string a run sees:
the evaluation's prefixes reach 599 brackets after `<s>` (600 positions,
`tgjax.data.dyck.LONG_RANGE_MAX_PREFIX`), past the 512 of a training row,
and the release computes its sinusoidal encodings for any distance.

CPU variants (`:cpu`, `:base-cpu`; what docs/pushdown-layers.md's CPU runs used): the
same recipe shrunk to a shared CPU: 4 layers, d = 64 (4 heads of 16, FFN
256, head depth embedding 16), rows of 64 (strings longer than 62 brackets
redrawn, about 19% of draws), batch 32, 400 steps with Adam at 1e-3 after
40 warm-up steps (the paper's 1e-4 after 8000 warm-up steps does not move
in 400 steps), cosine to 0; 256 validation strings, checked every 100 steps.
Alone on 2 CPU cores a run of 400 steps takes 116-129 s with its compiling
(benchmarks/dyck_table_seeds.py).

Memory: the full model's step at rows of 512 holds ~18.6 GB of activations
(six layers of [64, 8, 512, 512]); `--config.model.scan_layers=true
--config.model.remat=true` computes the same numbers in ~4.3 GB
(benchmarks/pushdown_remat.py), what a CPU run wants. On an accelerator,
`--config.training.bucket_lengths=true --config.training.group_by_length=true`
cut the padding (53-63 steps/s per run on one H200, two runs side by side).
"""

from tgjax.data.dyck import LONG_RANGE_MAX_PREFIX
from tgjax.train.tasks.pushdown_lm import default_config

PAPER_HEAD = "paper-head"


def get_config(variant=None):
    variant = variant or ""
    paper_head = variant == PAPER_HEAD or variant.endswith(f"-{PAPER_HEAD}")
    if paper_head:
        variant = variant.removesuffix(PAPER_HEAD).removesuffix("-")
    if variant not in ("", "pushdown", "base", "cpu", "base-cpu"):
        raise ValueError(f"configs/pushdown_dyck.py:{variant}: expected 'pushdown' (default), 'base' (Base-LM), "
                         f"'cpu' or 'base-cpu' (the reduced CPU runs), each optionally ending in '-paper-head'")
    base = variant in ("base", "base-cpu")
    config = default_config()
    config.model.d_model = 128
    config.model.num_layers = 6
    config.model.num_heads = 8
    config.model.ffw_hidden_size = 512
    config.model.sequence_length = 512
    config.model.pushdown_layers = "none" if base else "all"
    config.model.head_depth_dim = 32  # the release's head: d / (its CLI's 4 heads)
    # The release's head (Table 1's); the paper's with -paper-head (the module docstring).
    config.model.head_scaled = paper_head
    config.model.head_self_key_input = "projection" if paper_head else "query"
    config.model.head_relative_positions = not paper_head
    config.model.attachment_normalise = "legal" if paper_head else "causal"
    # Every distance the evaluation's longest prefix (<s> + 599 brackets) holds, none clipped (the release).
    config.model.max_relative_position = LONG_RANGE_MAX_PREFIX
    config.model.embedding_dropout = 0.0
    config.data.source = "dyck"
    config.data.dyck_max_length = 510
    config.data.on_too_long = "error"  # cannot happen: strings are redrawn to fit
    config.training.num_steps = 10_000
    config.training.batch_size = 64
    config.training.lr_schedule.kwargs.warmup_steps = 8_000
    config.training.lr_schedule.kwargs.cosine_cycle_length = 2_000
    config.evaluation.interval_steps = 500
    config.evaluation.batch_size = 64
    config.checkpointing.interval_steps = 500
    config.logging.interval_steps = 50
    config.logging.tensorboard = True
    if variant in ("cpu", "base-cpu"):
        config.model.d_model = 64
        config.model.num_layers = 4
        config.model.num_heads = 4
        config.model.ffw_hidden_size = 256
        config.model.head_depth_dim = 16
        config.model.sequence_length = 64
        config.data.dyck_max_length = 62
        config.data.dyck_num_valid = 256
        config.training.num_steps = 400
        config.training.batch_size = 32
        config.training.lr_schedule.kwargs.max_lr = 1e-3
        config.training.lr_schedule.kwargs.warmup_steps = 40
        config.training.lr_schedule.kwargs.cosine_cycle_length = 360
        config.evaluation.batch_size = 32
        config.evaluation.interval_steps = 100
        config.checkpointing.interval_steps = 100
        config.logging.interval_steps = 20
    return config
