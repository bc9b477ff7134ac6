"""JAX-native environments with gymnax's interface: Craft (`tgjax.envs.craft`) and its demonstration
bot (`tgjax.envs.craft_bot`).

Nothing is imported eagerly: `tgjax.envs.craft_rules` is NumPy-only, so the host-side data reader can
use it without pulling in JAX; import `tgjax.envs.craft` for the environment (it needs gymnax, the
`rl` extra).
"""
