"""eval (later issues)."""
