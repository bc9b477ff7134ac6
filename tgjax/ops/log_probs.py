"""log p(label) under a softmax over the last axis: the one place that reads a target's log-probability.

Every language model here turns logits into the log-probability of the next
token the same way; this is that way, in float32 whatever the logits' dtype
(bf16 logits would round log p to about 3 significant digits).
"""

from __future__ import annotations

import jax
import jax.numpy as jnp


def token_log_probs(logits: jax.Array, labels: jax.Array) -> jax.Array:
    """`log softmax(logits)[..., labels]`.

    Args:
      logits: `[..., V]`, any float dtype.
      labels: `[...]` integer ids in `[0, V)`; out-of-range ids are clamped by
        the gather (mask such positions out afterwards, as padding is).
    Returns:
      `[...]` float32 log-probabilities.
    """
    log_probs = jax.nn.log_softmax(logits.astype(jnp.float32), axis=-1)
    return jnp.take_along_axis(log_probs, labels[..., None].astype(jnp.int32), axis=-1)[..., 0]
