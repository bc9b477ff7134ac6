"""Ancestral sampling: every sample is a well-formed tree within the caps; greedy limits; log-probabilities."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from tgjax.eval import sample_command
from tgjax.eval.sample_command import main_sample
from tgjax.infer.sampling import Sampler, SamplingConfig, choose
from tgjax.syntax import actions as cc
from tgjax.syntax import token_types as tt

from .test_beam import exact_log_probs, get_model, tiny_vocab

BATCH = 16


@pytest.fixture(scope="module")
def vocab():
    return tiny_vocab()


def check_well_formed(tokens, config):
    """The tree reads back; caps and length hold; no reserved tokens."""
    tree = cc.tree_from_choe_charniak(tokens)  # raises on anything malformed, a second root included
    assert len(tokens) <= config.max_actions
    depth = consecutive = 0
    for token in tokens:
        kind = cc.token_type(token)
        assert token not in ("<s>", "<PAD>", "</s>")
        if kind == tt.OPENING_NT:
            depth += 1
            consecutive += 1
            assert depth <= config.max_open_nts and consecutive <= config.max_consecutive_opens
        else:
            consecutive = 0
            depth -= kind == tt.CLOSING_NT
    return tree


@pytest.mark.parametrize("name", ["tg", "txl_cc"])
@pytest.mark.parametrize("seed", [0, 1, 2])
def test_every_sample_is_a_well_formed_tree(vocab, name, seed):
    model = get_model(name, vocab.size)
    settings = [SamplingConfig(max_actions=12, max_open_nts=3, max_consecutive_opens=2, batch_size=BATCH),
                SamplingConfig(temperature=2.0, top_k=3, max_actions=20, max_open_nts=2, max_consecutive_opens=1,
                               batch_size=BATCH),
                SamplingConfig(temperature=0.7, top_p=0.8, max_actions=16, batch_size=BATCH, allow_unk=False)]
    config = settings[seed]
    samples = Sampler(model, vocab, name, config).sample(48, seed=seed)
    assert len(samples) == 48
    for s in samples:
        tree = check_well_formed(s.actions, config)
        assert tree.leaves()  # at least one word
        if not config.allow_unk:
            assert "<XXX>" not in s.actions
    if seed == 0:  # at temperature 1, samples of several lengths
        assert len({len(s.actions) for s in samples}) > 1


@pytest.mark.parametrize("name", ["tg", "txl_cc"])
def test_greedy_limits(vocab, name):
    model = get_model(name, vocab.size)
    base = dict(max_actions=14, max_open_nts=3, max_consecutive_opens=2, batch_size=BATCH)
    greedy = Sampler(model, vocab, name, SamplingConfig(temperature=0.0, **base)).sample(4, seed=0)
    assert all(s.actions == greedy[0].actions for s in greedy)
    for config in (SamplingConfig(top_k=1, **base), SamplingConfig(temperature=1e-4, **base),
                   SamplingConfig(top_p=1e-6, **base)):
        for seed in (0, 5):
            for s in Sampler(model, vocab, name, config).sample(4, seed=seed):
                assert s.actions == greedy[0].actions
    # A higher temperature gives variety.
    varied = Sampler(model, vocab, name, SamplingConfig(temperature=3.0, **base)).sample(BATCH, seed=1)
    assert len({tuple(s.actions) for s in varied}) > 1


@pytest.mark.parametrize("name", ["tg", "txl_cc"])
def test_log_prob_is_the_models_own_and_prompts_are_continued(vocab, name):
    model = get_model(name, vocab.size)
    config = SamplingConfig(max_actions=16, max_open_nts=3, max_consecutive_opens=2, batch_size=BATCH)
    sampler = Sampler(model, vocab, name, config)
    samples = sampler.sample(6, seed=3)
    np.testing.assert_allclose([s.log_prob for s in samples],
                               exact_log_probs(model, name, vocab, [s.actions for s in samples]), atol=1e-4)
    prompt = ["(A", "(B", "b"]
    continued = sampler.sample(6, seed=4, prompt=" ".join(prompt))
    full = exact_log_probs(model, name, vocab, [s.actions for s in continued])
    head = exact_log_probs(model, name, vocab, [prompt])[0]
    for s, total in zip(continued, full):
        assert s.actions[:3] == prompt and s.num_prompt_actions == 3
        check_well_formed(s.actions, config)
        assert abs(s.log_prob - (total - head)) < 1e-4
    # A complete prompt is returned as it is; an unknown word in a prompt is kept.
    (done,) = sampler.sample(1, prompt="(A a A)")
    assert done.actions == ["(A", "a", "A)"] and done.log_prob == 0.0
    (unknown,) = sampler.sample(1, prompt="(A zebra")
    assert unknown.actions[:2] == ["(A", "zebra"]


def test_bad_prompts_and_configs(vocab):
    sampler = Sampler(get_model("tg", vocab.size), vocab, "tg", SamplingConfig(max_actions=6, batch_size=BATCH))
    for prompt, message in [("a", "outside any constituent"), ("(A b B)", "innermost open constituent"),
                            ("(A A)", "empty constituent"), ("(A a A) (B", "already complete"),
                            ("(C a", "unknown non-terminal"), ("(A (A (A (A (A", "no room")]:
        with pytest.raises(ValueError, match=message):
            sampler.sample(1, prompt=prompt)
    for kwargs, message in [(dict(temperature=-1), "temperature"), (dict(top_k=-1), "top_k"),
                            (dict(top_p=0.0), "top_p"), (dict(max_actions=2), "max_actions")]:
        with pytest.raises(ValueError, match=message):
            SamplingConfig(**kwargs)
    with pytest.raises(ValueError, match="syntactic model"):
        Sampler(get_model("tg", vocab.size), vocab, "txl_terminals")


def test_choose_truncates_as_asked():
    log_probs = jnp.log(jnp.array([[0.5, 0.3, 0.15, 0.05]] * 2000))
    allowed = jnp.ones((2000, 4), bool).at[:, 0].set(False)  # the best is not allowed
    key = jax.random.PRNGKey(0)

    def draw(temperature=1.0, top_k=0, top_p=1.0, greedy=False):
        return np.asarray(choose(key, log_probs, allowed, jnp.float32(temperature), jnp.int32(top_k),
                                 jnp.float32(top_p), greedy=greedy))

    assert set(draw(greedy=True)) == {1}
    assert set(draw(top_k=1)) == {1}
    assert set(draw(top_k=2)) == {1, 2}
    counts = np.bincount(draw(), minlength=4) / 2000
    np.testing.assert_allclose(counts, [0, 0.6, 0.3, 0.1], atol=0.04)  # renormalised over the allowed
    # top_p=0.7 of (0.6, 0.3, 0.1): the first two (0.6 < 0.7 <= 0.9).
    assert set(draw(top_p=0.7)) == {1, 2}
    assert set(draw(top_p=0.5)) == {1}
    assert set(draw(temperature=1e-3)) == {1}


def test_main_sample(vocab, monkeypatch, capsys, tmp_path):
    model = get_model("tg", vocab.size)

    class Loaded:
        pass

    loaded = Loaded()
    loaded.model, loaded.vocab, loaded.model_name = model, vocab, "tg"
    loaded.pipeline_fields = {"rule": "tg"}
    monkeypatch.setattr(sample_command, "_load", lambda workdir, step: loaded)
    assert main_sample(["--workdir", "W", "--num-samples", "3", "--max-actions", "12", "--batch-size",
                       str(BATCH), "--max-open-nts", "3", "--log-probs"]) == 0
    lines = capsys.readouterr().out.strip().split("\n")
    assert len(lines) == 3
    for line in lines:
        log_prob, tree = line.split("\t")
        assert float(log_prob) < 0 and tree.startswith("(")
    out = tmp_path / "samples.txt"
    assert main_sample(["--workdir", "W", "--num-samples", "2", "--temperature", "0", "--prompt", "(B c",
                       "--max-actions", "12", "--batch-size", str(BATCH), "-o", str(out)]) == 0
    trees = out.read_text().strip().split("\n")
    assert len(trees) == 2 and trees[0] == trees[1] and trees[0].startswith("(B c")
    assert main_sample(["--workdir", "W", "--prompt", "a", "--batch-size", str(BATCH)]) == 2
    assert "outside any constituent" in capsys.readouterr().err
