"""Host-side input pipeline: vocabularies, corpora, batching. Never imports JAX."""
