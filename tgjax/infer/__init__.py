"""What a trained model computes for a sentence.

- `loading`: a trained workdir back as a model, its vocabulary and settings;
- `scoring`: log p of given sequences (per token, per word), batched like training;
- `incremental`: the per-prefix caches one action at a time (`PrefixScorer`);
- `search`: what a model family gives a search (`SearchFamily`: states, allowed actions, log-probabilities)
  and a sampler (`SamplingFamily`: the same states one model id at a time);
- `choe_charniak`: that interface for TG and TXL (CC) and their ensembles;
- `beam`: word-synchronous beam search (p(x) bounds, surprisals, parses), over a `SearchFamily`;
- `ensemble`: the uniform mixture of several models, per action or per sequence;
- `sampling`: well-formed trees sampled from a model, through its `SamplingFamily`;
- `perplexity`: proposal files and the word-perplexity bound over them.
- `onlstm`: a trained ON-LSTM LM back from its workdir, and its per-layer syntactic distances.

The metrics and commands that use these live in `tgjax.eval`; nothing here
imports it, nor the trainer (the arrows run eval → infer → models, data, syntax; the workdir layout both
training and loading use is `tgjax.workdir`; `tests/infer/test_layering.py` checks every import).
"""
