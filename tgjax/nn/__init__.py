"""Flax NNX modules that other projects import, each usable on its own.

- `attention`: relative multi-head attention over `[memory, segment]`, any mask, any relative positions;
- `transformer_xl`: the Transformer-XL layer of Transformer Grammars and their baselines;
- `pushdown_attention`: Pushdown attention (stack-tape depth embeddings on the keys, gathered per depth value)
  and its block;
- `attachment_head`: the Pushdown attachment head, legal-slot masks and the attachment loss;
- `stack_attention`: stack-attention sublayers (superposition and nondeterministic stacks);
- `onlstm`: the ON-LSTM cell and layer (cumax master gates; Shen et al., 2019);
- `ordered_memory`: the Ordered Memory module (slots, pointer, gated recursive cell; Shen et al., 2019);
- `dgn`: UDGN's Dependency Graph Network layer (channels compete, any [B, T, T] mask) and its mask;
- `dependency_parser`: UDGN's BiLSTM parser, p(head of i = j);
- `params`: parameters annotated with logical axis names, for sharding.

Whole models are assembled from these in `tgjax.models`.
"""
