"""stack_lm_totc: stack-attention language models on the words of Tale of Two Cities, at a size a CPU trains.

§7's sentence-level set-up (`tgjax.train.tasks.stack_lm.default_config`) on
English prose instead of PTB (licensed): the treebank (6,904 / 346 / 293
sentences, about 156k / 6k / 6k words) sits in
../shared/data/tale_of_two_cities beside the repository, each tree's leaves one
sentence. Words seen once in training read as `<unk>` (`data.min_word_count =
2`), so that the unseen words of validation and test have a trained class.

§7's layout shrunk by four in width: 5 layers of d_model 64 (stack attention
in the middle one), 4 heads, feedforward 256, dropout 0.1; Tf+Sup's m = 127
(§7: 511 at d 256); Tf+Nd's |Q| = 2, |Γ| = 2, m = 5 (§7: 3, 3 and 10; the
dVPDA's cubic DP at §7's sizes trains about ten times slower on a CPU). Adam
at 1e-3 (§7 draws its rate from [1e-6, 1e-4] for runs 100 times longer),
gradients clipped to 5, batches of 32 sentences of similar lengths padded to
a multiple of 32 positions (9 compiled shapes up to the longest sentence's
259), 1,500 steps (about 7 epochs), validation every 250. About 2 steps/s
on one CPU core once compiled, for each of the three models.

The stack, as for stack_lm_tiny: superposition (Tf+Sup, the default),
nondeterministic (Tf+Nd) or none (Tf), the argument after the file name:

    tgjax train --config configs/stack_lm_totc.py:nondeterministic --workdir runs/stack_lm_totc_nd
    tgjax eval score --workdir runs/stack_lm_totc_nd --input ../shared/data/tale_of_two_cities/test.txt
"""

from pathlib import Path

import ml_collections

from tgjax.train.tasks.stack_lm import default_config

TREEBANK = Path(__file__).resolve().parents[1].parent / "shared" / "data" / "tale_of_two_cities"
SIZES = {"superposition": dict(stack_embedding_size=127),
         "nondeterministic": dict(stack_embedding_size=5, num_states=2, stack_alphabet_size=2),
         "none": {}}


def get_config(stack: str | None = None) -> ml_collections.ConfigDict:
    """`stack`: superposition (default), nondeterministic or none, with its sizes (`SIZES`)."""
    stack = (stack or "superposition").strip()
    config = default_config()
    config.trainer = "stack_lm"
    m = config.model
    m.stack, m.num_layers, m.d_model, m.num_heads, m.feedforward_size = stack, 5, 64, 4, 256
    for key, value in SIZES.get(stack, {}).items():
        setattr(m, key, value)
    d = config.data
    d.source, d.min_word_count = "treebank", 2
    d.train_path, d.valid_path = str(TREEBANK / "train.txt"), str(TREEBANK / "valid.txt")
    t = config.training
    t.num_steps, t.batch_size, t.learning_rate, t.length_bucket = 1_500, 32, 1e-3, 32
    config.evaluation.interval_steps = 250
    config.checkpointing = ml_collections.ConfigDict(dict(interval_steps=250))
    config.logging = ml_collections.ConfigDict(dict(interval_steps=50, tensorboard=False))
    return config
