"""eval (later issues)."""

from tgjax.eval.cfl import CrossEntropyDifference, cross_entropy_difference, string_log_probs  # noqa: F401
