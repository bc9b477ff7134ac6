"""The release's masked-LM corruption and loss for UDGN (released-code.md §4.4), shared by training and inference.

Vocabulary ids: `<unk>` 0, `<pad>` 1, `<mask>` 2 (the release's dictionary order).
Every token that is neither padding nor `<unk>` is masked independently with
probability `rate` and always replaced by `<mask>` (no 80/10/10); the loss
is the cross-entropy at the masked positions only.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import optax

UNK, PAD, MASK = "<unk>", "<pad>", "<mask>"
SPECIALS = (UNK, PAD, MASK)
UNK_ID, PAD_ID, MASK_ID = 0, 1, 2

__all__ = ["MASK", "MASK_ID", "PAD", "PAD_ID", "SPECIALS", "UNK", "UNK_ID", "mask_tokens", "masked_nll"]


def mask_tokens(key: jax.Array, tokens: jax.Array, valid: jax.Array, rate: float) -> tuple[jax.Array, jax.Array]:
    """(inputs [B, T], masked [B, T] bool) from tokens [B, T] and valid [B, T]: `masked` marks exactly the
    positions replaced by `<mask>`, which are the positions the loss counts."""
    eligible = valid & (tokens != UNK_ID)
    masked = jax.random.bernoulli(key, rate, tokens.shape) & eligible
    return jnp.where(masked, MASK_ID, tokens), masked


def masked_nll(logits: jax.Array, targets: jax.Array, masked: jax.Array) -> tuple[jax.Array, jax.Array]:
    """(summed cross-entropy over the masked positions, their number): logits [B, T, V], targets/masked [B, T]."""
    nll = optax.softmax_cross_entropy_with_integer_labels(logits.astype(jnp.float32), targets)
    return jnp.sum(jnp.where(masked, nll, 0.0)), jnp.sum(masked)
