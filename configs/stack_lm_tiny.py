"""stack_lm_tiny: a small stack-attention language model on the built-in treebank's sentences; trains in seconds.

DuSell & Chiang's §7 set-up (`tgjax.train.tasks.stack_lm.default_config`:
each sentence its own sequence, `<bos> words` predicting `words <eos>`) at toy
sizes: d_model 32, 3 layers (the stack attention in the middle one), 4 heads,
feedforward 64; superposition m = 32, or a dVPDA with |Q| = 2, |Γ| = 2, m = 4;
Adam at 3e-3, batches of 16 sentences, 300 steps, validation every 100.

The stack (`model.stack`, or the argument after the file name): superposition
(Tf+Sup, the default), nondeterministic (Tf+Nd), none (the plain transformer, Tf).

    tgjax train --config configs/stack_lm_tiny.py --workdir runs/stack_lm_tiny
    tgjax train --config configs/stack_lm_tiny.py:nondeterministic --workdir runs/stack_lm_nd
    tgjax train --config configs/stack_lm_tiny.py --config.model.stack=none --workdir runs/stack_lm_tf
"""

import ml_collections

SIZES = {"superposition": dict(stack_embedding_size=32),
         "nondeterministic": dict(stack_embedding_size=4, num_states=2, stack_alphabet_size=2),
         "none": {}}


def get_config(stack: str | None = None) -> ml_collections.ConfigDict:
    """`stack`: superposition (default), nondeterministic or none, with its toy sizes (`SIZES`);
    `--config.model.stack=...` changes the stack alone (m stays 32; |Q| and |Γ| are then the paper's 3)."""
    stack = (stack or "superposition").strip()
    return ml_collections.ConfigDict(dict(
        trainer="stack_lm",
        model=dict(stack=stack, num_layers=3, d_model=32, num_heads=4, feedforward_size=64, init_scale=0.1,
                   **SIZES.get(stack, {})),
        data=dict(source="builtin", train_path="builtin", valid_path="builtin", num_train_sentences=2000,
                  num_valid_sentences=200),
        training=dict(num_steps=300, batch_size=16, learning_rate=3e-3),
        evaluation=dict(interval_steps=100, batch_size=50),
        checkpointing=dict(interval_steps=100),
        logging=dict(interval_steps=20, tensorboard=False),
    ))
