"""onlstm_tiny: a small ON-LSTM language model on the built-in treebank's sentences; trains in seconds on a CPU.

The paper's recipe (`tgjax.train.tasks.onlstm_lm.default_config`, which
configs/onlstm_ptb.py runs as it is) at toy sizes: 2 layers [32 -> 64 ->
32], chunk 8, the same dropouts scaled down, SGD lr 30 with the random BPTT
lengths around 20, NT-ASGD with nonmono 1 so that the switch can happen
within the run, validation every epoch. Two layers, not the paper's three: at
these widths, with the release's initialisation and plain SGD, a third layer
shrinks the signal so much (layer outputs of std ~0.03, layer-0 gradients 60x
smaller than the top layer's) that a 3-layer model stayed at the unigram
perplexity for 12 epochs, where 2 layers reach about half of it in 4.

    tgjax train --config configs/onlstm_tiny.py --workdir runs/onlstm_tiny
"""

from tgjax.train.tasks.onlstm_lm import default_config


def get_config():
    config = default_config()
    m = config.model
    m.embedding_size, m.hidden_size, m.num_layers, m.chunk_size = 32, 64, 2, 8
    m.dropout, m.dropout_hidden, m.dropout_input, m.dropout_embedding, m.weight_drop = 0.2, 0.1, 0.2, 0.05, 0.2
    d = config.data
    d.source, d.train_path, d.valid_path = "builtin", "builtin", "builtin"
    d.num_train_sentences, d.num_valid_sentences = 2000, 200
    t = config.training
    t.batch_size, t.bptt, t.nonmono, t.num_epochs = 16, 20, 1, 4
    t.length_bucket = 48  # every segment of this recipe fits in 48 steps: one compiled shape
    config.evaluation.bptt = 40
    config.checkpointing.interval_steps = 100
    config.logging.interval_steps, config.logging.tensorboard = 10, False
    return config
