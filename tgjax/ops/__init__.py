"""Pure-JAX kernels, importable alone: the stacks of stack attention (DuSell & Chiang, ICLR 2024)
and the Ordered Neurons recurrences (ON-LSTM, Shen et al., ICLR 2019; Ordered Memory, NeurIPS 2019).

    from tgjax.ops import superposition_stack, nondeterministic_stack, onlstm_scan, ordered_memory_scan
    from tgjax.ops import token_log_probs

* `superposition_stack(actions, pushed)`: Joulin & Mikolov's stack, eqs. (5)-(8).
* `nondeterministic_stack(push, repl, pop, pushed, bottom)`: the dVPDA of
  Appendix B (Lang's algorithm in log space), a scan over span lengths with
  an outside-pass custom VJP.
* `onlstm_scan(x, h0, c0, w_ih, b_ih, w_hh, b_hh, chunk_size=C)`: the ON-LSTM
  layer (cumax master gates at chunk resolution) as one `lax.scan`, in the
  released code's weight layout.
* `ordered_memory_scan(x, valid, params, n_slots=N)`: Ordered Memory (Shen
  et al., NeurIPS 2019) as one `lax.scan`, thesis or release behaviour.
* `token_log_probs(logits, labels)`: log p of each label under a float32
  softmax over the last axis (what every language model's loss reads).
"""

from tgjax.ops.log_probs import token_log_probs
from tgjax.ops.nondeterministic import nondeterministic_stack
from tgjax.ops.onlstm import onlstm_scan
from tgjax.ops.ordered_memory import ordered_memory_scan
from tgjax.ops.superposition import superposition_stack

__all__ = ["nondeterministic_stack", "onlstm_scan", "ordered_memory_scan", "superposition_stack", "token_log_probs"]
