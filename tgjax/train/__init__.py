"""train (later issues)."""
