"""Metrics and evaluation commands, over what `tgjax.infer` computes.

- `evalb`: bracketing F1 as EVALB computes it (`tgjax eval f1`);
- `syntaxgym`, `blimp`: targeted syntactic evaluation (suites, circuits, SG score; minimal pairs);
- `parse`: `tgjax eval parse | sg | blimp`, driven by word-synchronous beam search;
- `rerank`: the best of several proposal trees under a model, and its F1;
- `pushdown_tapes`: a Pushdown-LM's agreement pairs scored on its own tapes and on the gold tape (a diagnostic);
- `unsupervised`: `tgjax eval unsupervised-parse`, trees from ON-LSTM distances, sentence and EVALB F1;
- `commands`, `summaries`, `shards`: `tgjax eval score | ppl | rerank | merge`, their per-sentence
  records and corpus summaries, sharded jobs and merging them;
- `sample_command`: `tgjax sample`.

The CFL tasks' cross-entropy difference is `tgjax.data.cfl_metric` (NumPy over a task's true distribution; the
trainer selects its best epoch by it, so it sits below `train/`).

Evaluation calls inference, never the reverse.
"""
