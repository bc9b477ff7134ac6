"""models (later issues)."""
