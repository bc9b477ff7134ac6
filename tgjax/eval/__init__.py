"""Metrics and evaluation commands, over what `tgjax.infer` computes.

- `evalb`: bracketing F1 as EVALB computes it (`tgjax eval f1`);
- `syntaxgym`, `blimp`: targeted syntactic evaluation (suites, circuits, SG score; minimal pairs);
- `cfl`: cross-entropy difference on the CFL tasks (the metric itself is `tgjax.data.cfl_metric`);
- `parse`: `tgjax eval parse | sg | blimp`, driven by word-synchronous beam search;
- `rerank`: the best of several proposal trees under a model, and its F1;
- `unsupervised`: `tgjax eval unsupervised-parse`, trees from ON-LSTM distances, sentence and EVALB F1;
- `commands`, `summaries`, `shards`: `tgjax eval score | ppl | rerank | merge`, their per-sentence
  records and corpus summaries, sharded jobs and merging them;
- `sample_command`: `tgjax sample`.

Evaluation calls inference, never the reverse.
"""

from tgjax.eval.cfl import CrossEntropyDifference, cross_entropy_difference, string_log_probs  # noqa: F401
