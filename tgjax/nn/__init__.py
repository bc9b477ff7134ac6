"""nn (later issues)."""
