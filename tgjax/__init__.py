"""tgjax: syntactic language models at scale in JAX/Flax."""

__version__ = "0.1.0"
