"""Stack attention on the five CFL tasks: DuSell & Chiang (ICLR 2024), §6 and Appendix D.

    tgjax train --config configs/stack_cfl.py --config.task=dyck --config.model=tf_nd --workdir runs/dyck_nd
    tgjax train --config configs/stack_cfl.py:marked_reversal,tf_sup --workdir runs/mr_sup   # same, as an argument

Tasks (`task`): marked_reversal (w#wᴿ), unmarked_reversal (wwᴿ), padded_reversal
(waᵖwᴿ), dyck (Dyck-2), hardest_cfl. Models (`model`): tf (SDPA), tf_sup
(superposition stack attention), tf_nd (nondeterministic stack attention); the
stack attention replaces the self-attention of the middle (third) layer.

The paper's set-up (§6, Appendix D), with the authors' released code where the
two differ (each such point a named switch, both behaviours below):
  * 5 pre-norm layers, 4 heads, feedforward 2·d_model, dropout 0.1; Tf d_model 32;
    Tf+Sup d_model = m = 32; Tf+Nd d_model 28, m 5, |Q| = 2, |Γ| = 3 (w#wᴿ, wwᴿ,
    Dyck) or |Q| = 3, |Γ| = 3 (waᵖwᴿ, Hardest CFL) — `tgjax.models.stack_lm.STACK_CFL_SIZES`.
    Every `architecture.*` key left None takes that value; set one to change it.
  * Data: a fresh training set of 10,000 and validation set of 1,000 strings
    (lengths 40–80, one length per group of 10) for every run; the fixed test set
    of 100 strings per length 40–100.
  * Adam, minibatches of 10 strings of one length (batches made once, shuffled
    every epoch), loss = cross-entropy summed over time steps (mean over the
    batch's strings), gradients clipped to L2 norm 5; the initial learning rate
    drawn log-uniformly from [5e-4, 1e-2] (unless `training.learning_rate` is
    given), multiplied by 0.9 after `training.lr_patience` epochs without
    improvement of the validation cross-entropy, early stopping after 10, at most
    200 epochs; the parameters of the best validation epoch are kept.
  * The paper trains 10 runs per task and model and reports the best by
    validation: `--config.training.num_trials=10` (each trial its own seed, data
    and learning rate, in WORKDIR/trial_K; the best is reported).

Paper text vs the authors' release (defaults: the release, which produced the
paper's numbers):
  * Pushed vectors, `architecture.pushed_vectors`: "released" (default) pushes
    the raw W_v x (superposition: no activation; nondeterministic: W_v x is the
    *log* pushed vector, v = exp(W_v x)); "paper" applies σ as eq. (17) prints.
  * Initialisation (Appendix D.2), `StackLMConfig.init`: "released" (default):
    the SDPA layers' attention and feedforward weights and biases U(±0.1) (the
    release's library encoder layers fall to its uniform default), the stack
    layer's feedforward and the output layer Xavier with biases 0, embeddings and
    w_v U(±0.1), layer norms 1/0; "xavier" (tgjax's earlier default): Xavier
    weights everywhere, attention biases 0, feedforward/output biases U(±0.1).
  * Vocabulary, `StackLMConfig.input_ids` / `output_ids`: as the authors' models,
    the embedding covers BOS and the symbols and the softmax EOS and the symbols
    (|Σ| + 1 classes, never PAD or BOS), so parameter counts equal Table 5
    (Hardest CFL: Tf 43,304, Tf+Sup 41,224, Tf+Nd 36,861); None gives every id
    of the PAD/BOS/EOS/symbols vocabulary (|Σ| + 3) a row and a class.
    (`init` is the config key `architecture.init`; `input_ids` and `output_ids`
    are model fields with these defaults, not config keys.)
  * Learning-rate decay patience, `training.lr_patience`: the text says "after 5
    epochs of no improvement" (lr_patience=5, the default: the decay comes at the
    5th bad epoch in a row). The release uses PyTorch's ReduceLROnPlateau with
    patience 5, which decays at the 6th bad epoch in a row and counts an epoch
    as an improvement only if the validation cross-entropy falls below
    best · (1 − 1e-4): reproducing the release is `--config.training.lr_patience=6
    --config.training.lr_threshold=1e-4` (default 0: any decrease is an
    improvement, as the text). On the Δ criterion the release's threshold is an
    absolute 1e-4 · (Δ_best + the true cross-entropy), since Δ = cross-entropy −
    a constant; the plateau rule applies it so (`Plateau(threshold_offset=)`).

Fast runs: `--config.training.epochs=3 --config.data.train_size=1000
--config.data.valid_size=200 --config.data.test_lengths=40,60,80,100
--config.data.test_per_length=20 --config.training.learning_rate=0.005`.
"""

import ml_collections


def get_config(arg: str | None = None) -> ml_collections.ConfigDict:
    """`arg` = "TASK" or "TASK,MODEL" sets `task` / `model` (overridable as usual)."""
    task, model = "marked_reversal", "tf"
    if arg:
        parts = [p.strip() for p in arg.split(",")]
        task = parts[0] or task
        if len(parts) > 1 and parts[1]:
            model = parts[1]
    # Every other key: tgjax.train.cfl.default_config (the paper's set-up; `architecture.*` None = the paper's).
    return ml_collections.ConfigDict(dict(trainer="cfl", task=task, model=model))
