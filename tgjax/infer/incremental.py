"""Scoring many action prefixes at once on device: the machinery under beam search and sampling.

Beam search and ancestral sampling both ask one question many times: given
a batch of action prefixes (different lengths, different trees), what does
the model predict next, and what log-probability does it give to a known
continuation (a word's pieces, a run of closing non-terminals)? `PrefixScorer`
answers it for a whole batch with one jitted model call per shape bucket.

The reference approach is to **recompute the model on every full prefix**:
each sequence is BOS + its actions, laid out by the model's own masking rule
(`tgjax.syntax.masks.TGMasking` / `TXLMasking`, host side) as a single
segment with an empty memory. Scoring is incremental on top of that, and
exact: a `PrefixCache` holds the *layer inputs* (what Transformer-XL keeps as
memory) of a prefix's first positions, and a sequence scored with the cache
of its parent prefix runs the model on its new positions only, with the
cache as the memory. The rule still lays out the whole sequence, so the
memory keys get their positions, depths and push/pop times (a closing
non-terminal pops earlier positions) from the same computation as a full
recompute; every mask is causal, so the cached layer inputs are the ones a
full recompute would produce (tests check the equality against
`model.__call__`). Without caches it is the full recompute.

Host side (NumPy): layouts (the masking rule), bucketing, slicing the layout
into memory and new positions, assembling the caches `[K, rows, M, d]`, and
mapping positions between the action sequence and the model's layout (TG
duplicates every closing non-terminal into CNT1 + CNT2; only CNT2 predicts).
Device side (`jax.jit`): the model on the new positions, and the
log-softmax at the gathered positions only, so that the output projection
`[d, V]` is applied to a handful of rows per sequence. Caches live on the
host (float32): each call moves `[K, rows, M, d]` in and `[K, rows, S, d]`
out, cheap for the model sizes evaluated on one machine; a device-resident
cache is the next step for large models.

Compilation: one trace per (rows, M, S, P) bucket: a call has `max_batch`
rows or a power of two of at least `min_batch` (a batch is split into such
calls, the last padded); the memory M is a power of two of at least
`length_bucket`; the new positions S a power of two (at least 4) up to
`length_bucket`, a multiple of it beyond; the positions read P (the query's,
then one per scored continuation action) a power of two. The output
projection and log-softmax over the vocabulary run on the P read positions
only: with a word dictionary a beam step reads one position per hypothesis.

Faithfulness. A single segment equals the training-time segmented reading
for TG with smart memory whenever the stack never holds more than
`memory_length` entries (the masks and depth positions are the same; see
`tests/models/test_transformer_lm.py`). For TXL (and TG variants with a TXL
memory) a prefix longer than `sequence_length + memory_length` positions
sees more context than the model did in training, and linear relative
positions beyond the model's table are clipped; for the sentence lengths of
the treebanks this rarely matters.
"""

from __future__ import annotations

import dataclasses
import functools
from collections.abc import Sequence

import jax
import jax.numpy as jnp
import numpy as np
from flax import nnx

from tgjax.data.batching import round_up
from tgjax.models.registry import model_spec
from tgjax.models.transformer_lm import TransformerLM
from tgjax.syntax import masks
from tgjax.syntax import token_types as tt

# The masking rules this module can lay sequences out with.
RULES = ("tg", "txl_cc", "txl_terminals")


def rule_of(model_name: str) -> str:
    """The data rule of a registered model: "tg", "txl_cc" or "txl_terminals"; ValueError otherwise."""
    rule = model_spec(model_name).pipeline["rule"]
    if rule not in RULES:
        raise ValueError(f"model {model_name!r} reads data with rule {rule!r}; scoring supports {RULES}")
    return rule


def _next_power_of_two(n: int) -> int:
    return 1 << max(int(n) - 1, 0).bit_length()


# -----------------------------------------------------------------------------
# Device side.


def hidden_states(model: TransformerLM, batch: dict[str, jax.Array], memory: jax.Array,
                  *, with_layer_inputs: bool = False):
    """The final hidden states `[B, T, d]` of `model(batch, memory, deterministic=True)`, before the projection.

    The model's own forward pass (`TransformerLM.hidden_states`), so that callers can project only the rows
    they need (`project`). With `with_layer_inputs`, also returns the input of every layer `[K, B, T, d]`
    (what Transformer-XL memory holds, and what `PrefixCache` keeps).
    """
    x, _, layer_inputs = model.hidden_states(batch, memory, deterministic=True, with_layer_inputs=True)
    return (x, layer_inputs) if with_layer_inputs else x


def project(model: TransformerLM, x: jax.Array) -> jax.Array:
    """Output logits `[..., V]` of hidden states `[..., d]` (`TransformerLM.logits`)."""
    return model.logits(x)


class _Static:
    """A graph definition as a jit static argument, hashed once (hashing a GraphDef walks the whole graph).

    Equal graph definitions (models of the same structure) are equal static
    arguments, so their scorers share compiled functions.
    """

    def __init__(self, graphdef):
        self.graphdef = graphdef
        self._hash = hash(graphdef)

    def __hash__(self) -> int:
        return self._hash

    def __eq__(self, other) -> bool:
        return isinstance(other, _Static) and (self.graphdef is other.graphdef or self.graphdef == other.graphdef)


@functools.partial(jax.jit, static_argnums=0)
def _score_fn(static: _Static, state, memory, batch, positions, targets, candidates):
    """Device side of `PrefixScorer.score`: the model on the new positions of B sequences.

    Args:
      memory: `[K, B, M, d]` cached layer inputs of the earlier positions.
      batch: the new positions' fields `[B, S]` (inputs, inputs_ttypes,
        position, depth, push_time, pop_time) and the memory keys' `[B, M]`
        (memory_pos, memory_depth, memory_push_time, memory_pop_time).
      positions: `[B, P]` int32 indices into the S new positions to read (entry 0: the query).
      targets: `[B, P]` int32 ids whose log-probability to read at each position.
      candidates: `[C]` int32 ids of the next-action distribution to return, or None (all V).
    Returns:
      `next_log_probs [B, C or V]` at `positions[:, 0]`, `target_log_probs [B, P]`,
      and the new positions' layer inputs `[K, B, S, d]`.
    """
    model = nnx.merge(static.graphdef, state)
    x, layer_inputs = hidden_states(model, batch, memory, with_layer_inputs=True)
    gathered = jnp.take_along_axis(x, positions[..., None], axis=1)  # [B, P, d]
    log_probs = jax.nn.log_softmax(project(model, gathered).astype(jnp.float32), axis=-1)  # [B, P, V]
    target_lp = jnp.take_along_axis(log_probs, targets[..., None], axis=-1)[..., 0]
    first = log_probs[:, 0]
    next_lp = first if candidates is None else first[:, candidates]
    return next_lp, target_lp, layer_inputs


# -----------------------------------------------------------------------------
# Host side.


@dataclasses.dataclass(frozen=True)
class PrefixCache:
    """The layer inputs of a sequence's first `length` layout positions (host side).

    `states` is `[K, length, d]` float32 (K layers). Position 0 is BOS. Made
    by `PrefixScorer.score`; valid for any sequence that starts with the
    actions it was computed for.
    """

    states: np.ndarray

    @property
    def length(self) -> int:
        return int(self.states.shape[1])


@dataclasses.dataclass
class ScoredPrefixes:
    """What `PrefixScorer.score` returns, in the order of the sequences given.

    Attributes:
      next_log_probs: `[N, C]` float32: log p(a | actions[:q]) for each
        candidate id a (`PrefixScorer.candidate_ids`, or all V ids), the
        model's *unrestricted* distribution.
      continuation_log_probs: per sequence, `[len - q]` float64:
        log p(actions[j] | actions[:j]) for j = q .. len - 1.
      caches: per sequence, the `PrefixCache` of BOS + actions[:q] (for
        scoring longer sequences that start with them).
    """

    next_log_probs: np.ndarray
    continuation_log_probs: list[np.ndarray]
    caches: list[PrefixCache | None]


class PrefixScorer:
    """Scores batches of action prefixes with a TG or TXL model; one jitted call per shape bucket.

    Args:
      model: a `TransformerLM` (TG, its variants, TXL (CC) or TXL (terminals)).
      rule: the model's data rule, "tg", "txl_cc" or "txl_terminals" (`rule_of(model_name)`).
      token_types: `[V]` int table: the token type of every id (`vocab.token_types(np.arange(V))`).
      bos_id: the id prepended to every sequence.
      candidate_ids: ids whose next-action log-probabilities to return (e.g.
        the non-terminals, for beam search), or None for the whole vocabulary.
      length_bucket: the smallest memory length, and the step of long new-position buckets
        (see the module docstring).
      max_batch: the most rows per model call (rounded up to a power of two).
      min_batch: the fewest rows per model call (fewer sequences are padded).
    """

    def __init__(self, model: TransformerLM, rule: str, token_types: np.ndarray, *, bos_id: int = 1,
                 candidate_ids: Sequence[int] | None = None, length_bucket: int = 32, max_batch: int = 256,
                 min_batch: int = 8):
        if rule not in RULES:
            raise ValueError(f"rule: expected one of {RULES}, got {rule!r}")
        config = model.config
        if (rule == "tg") != bool(config.tg):
            raise ValueError(f"rule {rule!r} does not match the model (config.tg={config.tg})")
        self.model = model
        self.rule = rule
        self.token_types = np.asarray(token_types, np.int32)
        if self.token_types.shape != (config.vocab_size,):
            raise ValueError(f"token_types has shape {self.token_types.shape}; expected ({config.vocab_size},)")
        self.bos_id = int(bos_id)
        self.candidate_ids = None if candidate_ids is None else np.asarray(candidate_ids, np.int32)
        self.length_bucket = int(length_bucket)
        self.max_batch = _next_power_of_two(max_batch)
        self.min_batch = min(_next_power_of_two(min_batch), self.max_batch)
        self._rules: dict[int, masks._Rule] = {}
        # The graph definition is a static argument: scorers of models with the same structure
        # share compiled functions.
        graphdef, self._state = nnx.split(model)
        self._static = _Static(graphdef)
        self.calls = 0  # model calls made (for benchmarks)
        self.rows = 0  # rows scored, padding included
        self.positions = 0  # new positions run through the model, padding included

    @property
    def vocab_size(self) -> int:
        return self.model.config.vocab_size

    def _rule(self, seq_len: int):
        rule = self._rules.get(seq_len)
        if rule is None:
            c = self.model.config
            if self.rule == "tg":
                # One segment from an empty memory: the memory kind does not change the segment's
                # mask; TXL-style memory keeps the rule's (unused) next-memory computation vectorised.
                rule = masks.TGMasking(seq_len, 1, smart_memory=False, distinct_compose=c.distinct_compose,
                                       linear_relpos=c.linear_relpos)
            else:
                rule = masks.TXLMasking(seq_len, 1)
            self._rules[seq_len] = rule
        return rule

    def layout_positions(self, actions: np.ndarray) -> np.ndarray:
        """`[n + 1]`: the layout position that predicts action i (i = 0..n-1), and after the last (i = n).

        Position 0 of the layout is BOS. With TG, a closing non-terminal takes
        two layout positions; its second copy (CNT2) is the one that predicts.
        """
        types = self.token_types[actions]
        width = np.ones(len(actions) + 1, np.int64)
        if self.rule == "tg":
            width[1:] += types == tt.CLOSING_NT
        return np.cumsum(width) - 1

    def score(self, sequences: Sequence[Sequence[int]], queries: Sequence[int],
              caches: Sequence[PrefixCache | None] | None = None) -> ScoredPrefixes:
        """Next-action log-probabilities after `sequences[k][:queries[k]]`, and those of the rest.

        Args:
          sequences: N action-id sequences (no BOS), each a well-formed prefix
            (closing non-terminals close something; for txl_terminals, words only,
            possibly ended by the end-of-sentence id, as `TerminalScorer` scores them).
          queries: N integers q_k in [0, len(sequences[k])].
          caches: optional, per sequence, a `PrefixCache` of a prefix of it (it
            must have been computed for the same leading actions: this is not
            checked) that stops before the query's position, e.g. the cache a
            previous call returned for a query q' < q_k; the model then runs on
            the remaining positions only. None: from scratch.
        Returns:
          `ScoredPrefixes`: `next_log_probs [N, C]` is the distribution after q_k
          actions; `continuation_log_probs[k]` scores actions q_k .. len - 1;
          `caches[k]` covers BOS + actions[:q_k].
        """
        num = len(sequences)
        if len(queries) != num or (caches is not None and len(caches) != num):
            raise ValueError(f"{num} sequences, {len(queries)} queries"
                             + ("" if caches is None else f", {len(caches)} caches"))
        width = self.vocab_size if self.candidate_ids is None else len(self.candidate_ids)
        out = ScoredPrefixes(np.zeros((num, width), np.float32), [np.zeros(0)] * num, [None] * num)
        if num == 0:
            return out
        rows = []
        for k in range(num):
            a = np.asarray(sequences[k], np.int64)
            q = int(queries[k])
            if not 0 <= q <= len(a):
                raise ValueError(f"sequence {k}: query {q} outside [0, {len(a)}]")
            if len(a) and (a.min() < 0 or a.max() >= self.vocab_size):
                raise ValueError(f"sequence {k}: ids outside [0, {self.vocab_size})")
            pos = self.layout_positions(a)
            cache = None if caches is None else caches[k]
            start = 0 if cache is None else cache.length
            if start > pos[q]:
                raise ValueError(f"sequence {k}: its cache covers {start} positions, past the query's "
                                 f"(position {pos[q]}: the query must be computed, so the cache must be shorter)")
            rows.append(_Row(k, a, q, pos, cache, start))
        memory_bucket = np.array([max(_next_power_of_two(r.start), self.length_bucket) for r in rows])
        for mem_len in np.unique(memory_bucket):
            members = [rows[i] for i in np.flatnonzero(memory_bucket == mem_len)]
            members.sort(key=lambda r: r.pos[-1] + 1 - r.start)  # similar numbers of new positions together
            begin = 0
            for size in self._row_buckets(len(members)):
                chunk = members[begin:begin + size]
                begin += len(chunk)
                self._score_chunk(int(mem_len), size, chunk, out)
        return out

    def _row_buckets(self, n: int) -> list[int]:
        """Row counts of the calls for n sequences: `max_batch`-row calls, then the rest as powers of two.

        The rest is split greedily into powers of two (at least `min_batch`
        rows each), so padding stays under `min_batch` rows per bucket.
        """
        sizes = [self.max_batch] * (n // self.max_batch)
        rest = n % self.max_batch
        while rest > 0:
            size = max(1 << (rest.bit_length() - 1), self.min_batch)  # the largest power of two <= rest
            sizes.append(size)
            rest -= size
        return sizes

    def _new_positions_bucket(self, n: int) -> int:
        if n <= self.length_bucket:
            return max(_next_power_of_two(n), 4)
        return round_up(n, self.length_bucket)

    def _score_chunk(self, mem_len: int, rows: int, chunk: list[_Row], out: ScoredPrefixes) -> None:
        config = self.model.config
        lengths = np.array([r.pos[-1] + 1 for r in chunk])  # layout lengths
        starts = np.array([r.start for r in chunk])
        new = self._new_positions_bucket(int((lengths - starts).max()))
        # The whole layout of every sequence (host side, the masking rule), padded to start + new.
        sequences = []
        for r in chunk:
            types = self.token_types[r.actions]
            sequences.append((np.concatenate([[self.bos_id], r.actions]).astype(np.int32),
                              np.concatenate([[tt.BOS], types]).astype(np.int32),
                              np.concatenate([r.actions, [0]]).astype(np.int32),
                              np.concatenate([types, [tt.PAD]]).astype(np.int32)))
        seq_len = round_up(int(lengths.max()), self.length_bucket)
        compact, seq_index = self._rule(seq_len).compact_chunks_many(sequences)
        if len(seq_index) != len(chunk):  # pragma: no cover - guarded by seq_len
            raise AssertionError(f"{len(seq_index)} segments for {len(chunk)} sequences at T={seq_len}")
        width = max(seq_len, int(starts.max()) + new)
        fill = {"inputs": 0, "inputs_ttypes": tt.PAD, "depth": 0, "push_time": masks.NEVER, "pop_time": masks.NEVER}
        layout = {name: _pad_to(np.asarray(getattr(compact, name)), width, value) for name, value in fill.items()}
        layout["position"] = np.broadcast_to(np.arange(width, dtype=np.int32), (len(chunk), width))
        # New positions [start, start + new) and memory slots [0, mem_len) (empty beyond start).
        new_index = starts[:, None] + np.arange(new)
        batch = {name: np.take_along_axis(values, new_index, axis=1) for name, values in layout.items()}
        slot = np.arange(mem_len)
        in_memory = slot[None, :] < starts[:, None]
        mem_index = np.minimum(np.broadcast_to(slot, (len(chunk), mem_len)), width - 1)
        for key, name, empty in (("memory_pos", "position", -1), ("memory_depth", "depth", 0),
                                 ("memory_push_time", "push_time", masks.NEVER),
                                 ("memory_pop_time", "pop_time", masks.NEVER)):
            batch[key] = np.where(in_memory, np.take_along_axis(layout[name], mem_index, axis=1), empty)
        memory = np.zeros((config.num_layers, rows, mem_len, config.d_model), np.float32)
        # Positions to read: the query's, then one per further action (its log-probability).
        reads = _next_power_of_two(max(len(r.actions) - r.q for r in chunk) or 1)
        positions = np.zeros((rows, reads), np.int32)
        targets = np.zeros((rows, reads), np.int32)
        for i, r in enumerate(chunk):
            if r.cache is not None:
                memory[:, i, :r.start] = r.cache.states
            span = len(r.actions) - r.q
            read = r.pos[r.q:len(r.actions)] - r.start
            positions[i, :span] = read
            positions[i, span:] = r.pos[r.q] - r.start
            targets[i, :span] = r.actions[r.q:]
        batch = {name: _pad_rows(np.asarray(v, _DTYPES[name]), rows) for name, v in batch.items()}
        next_lp, target_lp, layer_inputs = _score_fn(
            self._static, self._state, memory, batch, positions, targets,
            None if self.candidate_ids is None else jnp.asarray(self.candidate_ids))
        next_lp = np.asarray(next_lp)
        target_lp = np.asarray(target_lp, np.float64)
        layer_inputs = np.asarray(layer_inputs)
        self.calls += 1
        self.rows += rows
        self.positions += rows * new
        for i, r in enumerate(chunk):
            out.next_log_probs[r.index] = next_lp[i]
            out.continuation_log_probs[r.index] = target_lp[i, :len(r.actions) - r.q]
            keep = r.pos[r.q] + 1 - r.start  # new positions up to the query's
            fresh = layer_inputs[:, i, :keep]
            states = fresh if r.cache is None else np.concatenate([r.cache.states, fresh], axis=1)
            out.caches[r.index] = PrefixCache(states)


@dataclasses.dataclass
class _Row:
    """One sequence of a `score` call (host side)."""

    index: int
    actions: np.ndarray
    q: int
    pos: np.ndarray  # layout position predicting each action, and after the last
    cache: PrefixCache | None
    start: int  # layout positions already cached


_DTYPES = {"inputs": np.int32, "inputs_ttypes": np.int32, "position": np.int32, "depth": np.int32,
           "push_time": np.int32, "pop_time": np.int32, "memory_pos": np.int32, "memory_depth": np.int32,
           "memory_push_time": np.int32, "memory_pop_time": np.int32}



def _pad_to(values: np.ndarray, width: int, fill) -> np.ndarray:
    """`[B, T]` -> `[B, width]`, new columns set to `fill`."""
    if values.shape[1] >= width:
        return values[:, :width]
    extra = np.full((values.shape[0], width - values.shape[1]), fill, values.dtype)
    return np.concatenate([values, extra], axis=1)


def _pad_rows(values: np.ndarray, rows: int) -> np.ndarray:
    """Pads the leading axis to `rows` with copies of row 0 (valid inputs, discarded outputs)."""
    if values.shape[0] >= rows:
        return values
    return np.concatenate([values, np.repeat(values[:1], rows - values.shape[0], axis=0)])


__all__ = ["PrefixCache", "PrefixScorer", "RULES", "ScoredPrefixes", "hidden_states", "project", "rule_of"]
