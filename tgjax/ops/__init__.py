"""Pure-JAX stack kernels for stack attention (DuSell & Chiang, ICLR 2024).

    from tgjax.ops import superposition_stack, nondeterministic_stack

* `superposition_stack(actions, pushed)`: Joulin & Mikolov's stack, eqs. (5)-(8).
* `nondeterministic_stack(push, repl, pop, pushed, bottom)`: the dVPDA of
  Appendix B (Lang's algorithm in log space), a scan over span lengths with
  an outside-pass custom VJP.
"""

from tgjax.ops.nondeterministic import nondeterministic_stack
from tgjax.ops.superposition import superposition_stack

__all__ = ["nondeterministic_stack", "superposition_stack"]
