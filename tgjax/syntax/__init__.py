"""Host-side syntax: trees and every tensor derived from them. NumPy only, never JAX."""
