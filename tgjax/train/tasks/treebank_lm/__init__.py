"""The treebank language model family: Transformer Grammars and the TXL baselines (`trainer="lm"`).

    task.py        the trainer's task (`TreebankLMTask`): data, model, step, validation, checkpoint facts
    state.py       its state on the mesh (a `ParamsState` whose carry is the Transformer-XL memory) and steps
    inputs.py      its training data: pipelines, the vocabulary and its checks, the unigram baseline
    validation.py  its config's values, checked key by key before anything starts
"""

from tgjax.train.tasks.treebank_lm.task import (
    TreebankLMTask,
    check_same_run,
    count_model_parameters,
    describe,
    model_batch,
    resolve_model_config,
    validate_config,
)

__all__ = ["TreebankLMTask", "check_same_run", "count_model_parameters", "describe", "model_batch",
           "resolve_model_config", "validate_config"]
