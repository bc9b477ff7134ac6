"""ops (later issues)."""
