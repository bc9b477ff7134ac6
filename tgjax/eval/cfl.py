"""Cross-entropy difference on the CFL tasks: the metric lives in `tgjax.data.cfl_metric`.

It is NumPy over a task's true distribution, and the CFL trainer selects its
best epoch by it, so it sits below `train/` (the arrows run down); evaluation
code keeps importing it from here.
"""

from tgjax.data.cfl_metric import BinDifference, CrossEntropyDifference, cross_entropy_difference, string_log_probs

__all__ = ["BinDifference", "CrossEntropyDifference", "cross_entropy_difference", "string_log_probs"]
