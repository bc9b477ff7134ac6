"""Sharded evaluation jobs: which sentences a shard takes, per-shard result files, and merging them.

Every eval command takes `--shard I/N` and then scores sentence k of its
input iff k % N == I (round robin: a shard needs no count of the input
first, so files of any size stream, and shards get equal work on sorted
input). Without `--shard`, a multi-host run (`jax.process_count() > 1`) takes
the host's shard, `process_index()/process_count()`; a single process takes 0/1.

Result files. A command writes JSON lines, one record per sentence in index
order, each with its global `"index"`; with N > 1 the file name gets the
shard (`out.jsonl` -> `out.shard-00001-of-00003.jsonl`, or the `{shard}` and
`{num_shards}` fields if the name has them). Beside each results file,
`<results>.meta.json` records the command, its settings, the shard, the
number of records and the summary; it is written last, after the results
file is complete (both are written under temporary names and renamed), so a
shard cut short has no meta file and `merge` refuses it.

Merging (`merge` / `tgjax eval merge`): checks that the shards are of one
command with equal settings and together cover 0..N−1 exactly once, merges
their records by index (streaming), writes them with a meta file whose
summary is recomputed from the merged records. Summaries use exact
summation (`summaries.ExactSum`), so N shards merged equal one shard bit for bit.
"""

from __future__ import annotations

import heapq
import io
import json
import os
import sys
from collections.abc import Iterable, Iterator, Sequence
from pathlib import Path
from typing import Any, NamedTuple

from tgjax.data.text_files import json_lines, read_text
from tgjax.outputs import AtomicFile, check_output, dumps_json, write_text

FORMAT = "tgjax.eval.results/1"
COMMANDS = ("score", "ppl", "rerank")


class ShardError(ValueError):
    """Shard files that cannot be merged, or a bad `--shard`; the message names the file."""


class Shard(NamedTuple):
    index: int
    count: int

    def __str__(self) -> str:
        return f"{self.index}/{self.count}"

    def takes(self, k: int) -> bool:
        return k % self.count == self.index


def parse_shard(text: str) -> Shard:
    """`"I/N"` -> Shard(I, N), 0 <= I < N."""
    try:
        i, n = (int(x) for x in text.split("/"))
    except ValueError:
        raise ShardError(f"--shard {text!r}: expected I/N, e.g. 0/4") from None
    if n < 1 or not 0 <= i < n:
        raise ShardError(f"--shard {text!r}: need 0 <= I < N")
    return Shard(i, n)


def default_shard() -> Shard:
    """This host's shard in a multi-host run (process index / count), else 0/1."""
    import jax

    count = jax.process_count()
    return Shard(jax.process_index(), count) if count > 1 else Shard(0, 1)


def job_shard(text: str | None) -> Shard:
    """The shard of a job: `--shard I/N` when given (`parse_shard`), else this host's (`default_shard`)."""
    return parse_shard(text) if text else default_shard()


def take(items: Iterable, shard: Shard) -> Iterator[tuple[int, Any]]:
    """`(global index, item)` for this shard's items."""
    for k, item in enumerate(items):
        if shard.takes(k):
            yield k, item


def shard_path(output: str | os.PathLike, shard: Shard) -> Path:
    """The results file of a shard (see the module docstring)."""
    output = os.fspath(output)
    if "{shard" in output or "{num_shards" in output:
        return Path(output.format(shard=shard.index, num_shards=shard.count))
    if shard.count == 1:
        return Path(output)
    path = Path(output)
    tag = f"shard-{shard.index:05d}-of-{shard.count:05d}"
    return path.with_name(f"{path.stem}.{tag}{path.suffix}") if path.suffix else path.with_name(f"{path.name}.{tag}")


def meta_path(results: str | os.PathLike) -> Path:
    return Path(f"{os.fspath(results)}.meta.json")


def _dumps(record: dict, where: str) -> str:
    """One record as a JSON line; a NaN or infinity (not JSON) is an `OutputError` naming `where`."""
    return dumps_json(record, where=where, ensure_ascii=False)


# Settings that change what a summary's numbers mean; the summary repeats them beside the numbers.
QUALIFYING_SETTINGS = ("pos_tags", "ensemble_mixture")


def with_qualifying_settings(summary: dict, settings: dict) -> dict:
    """`summary` with the `QUALIFYING_SETTINGS` present in `settings` copied in (in place; returned)."""
    summary.update({key: settings[key] for key in QUALIFYING_SETTINGS if key in settings})
    return summary


class ResultWriter:
    """Writes one command's records (JSON lines) and, on success, its meta file; stdout when `path` is None.

    Use as a context manager; `write(record)` checks that indices increase. The results and the meta file
    are written under temporary names and renamed when finished; a run that fails leaves neither behind.
    """

    def __init__(self, path: str | os.PathLike | None, command: str, settings: dict, shard: Shard):
        if command not in COMMANDS:
            raise ValueError(f"command {command!r}: expected one of {COMMANDS}")
        self.path = Path(path) if path is not None else None
        self.command, self.settings, self.shard = command, settings, shard
        self.num_records = 0
        self._last = -1
        self._file: io.TextIOBase | None = None
        self._atomic: AtomicFile | None = None  # the results file while it is written

    def __enter__(self) -> ResultWriter:
        if self.path is None:
            self._file = sys.stdout
        else:
            check_output(self.path)
            # A previous run's meta file goes first: if this run fails, nothing looks finished.
            meta_path(self.path).unlink(missing_ok=True)
            self._atomic = AtomicFile(self.path)
            self._file = self._atomic.file
        return self

    def write(self, record: dict) -> None:
        if record["index"] <= self._last:
            raise AssertionError(f"records out of order: {record['index']} after {self._last}")
        self._last = record["index"]
        where = f"{self.path}: sentence {record['index']}" if self.path else f"sentence {record['index']}"
        self._file.write(_dumps(record, where) + "\n")
        self.num_records += 1

    def finish(self, summary: dict) -> None:
        """Closes the results file and writes the meta file (call once everything is written)."""
        if self.path is None:
            self._file.flush()
            return
        meta = {"format": FORMAT, "command": self.command, "shard": [self.shard.index, self.shard.count],
                "num_records": self.num_records, "settings": self.settings, "summary": summary}
        meta_text = dumps_json(meta, where=str(meta_path(self.path)), indent=1, ensure_ascii=False) + "\n"
        self._atomic.commit()
        self._atomic = self._file = None
        write_text(meta_path(self.path), meta_text)

    def __exit__(self, exc_type, exc, tb) -> None:
        if self._atomic is not None:  # not finished: the temporary results file goes, no meta
            self._atomic.discard()
            self._atomic = self._file = None
        return None


def read_meta(results: str | os.PathLike) -> dict:
    path = meta_path(results)
    if not Path(results).exists():
        raise ShardError(f"{results}: no such results file")
    if not path.exists():
        raise ShardError(f"{results}: no meta file {path.name}; the shard did not finish (re-run it)")
    try:
        meta = json.loads(read_text(path))  # bad bytes: an error naming file:line:column
    except json.JSONDecodeError as e:
        raise ShardError(f"{path}: unreadable ({e})") from None
    if meta.get("format") != FORMAT:
        raise ShardError(f"{path}: format {meta.get('format')!r}, expected {FORMAT!r}")
    return meta


def read_records(results: str | os.PathLike) -> Iterator[dict]:
    for line_no, line in json_lines(results):  # bad bytes: an error naming file:line:column
        try:
            yield json.loads(line)
        except json.JSONDecodeError as e:
            raise ShardError(f"{results}:{line_no}: not a JSON record ({e.msg})") from None


def make_summary(command: str, settings: dict):
    """The summariser of a command's records: `.add(record)`, `.result() -> dict`."""
    if command == "score":
        from tgjax.eval.summaries import ScoreSummary

        return ScoreSummary(settings["rule"])
    if command == "ppl":
        from tgjax.eval.summaries import PplSummary

        # The settings decide what the perplexity is (a bound, or not) and so its name.
        return PplSummary(settings["rule"], documents=settings.get("documents", False),
                          dedup=settings.get("dedup", True))
    if command == "rerank":
        return _RerankSummary()
    raise ShardError(f"unknown command {command!r}")


class _RerankSummary:
    def __init__(self):
        self.records: list[dict] = []
        self.count = {"sentences": 0, "num_proposals": 0, "num_duplicates_removed": 0}

    def add(self, record: dict) -> None:
        self.count["sentences"] += 1
        self.count["num_proposals"] += record["num_proposals"]
        self.count["num_duplicates_removed"] += record["num_duplicates"]

    def result(self) -> dict:
        return dict(self.count)


def merge(inputs: Sequence[str | os.PathLike], output: str | os.PathLike | None, *,
          on_record=None, finalize=None) -> dict:
    """Merges shard results (see the module docstring); returns the merged meta (with the summary).

    `on_record(record)` is called for each merged record in index order (e.g.
    to collect reranked trees for F1); `finalize(summary)` may add to the
    summary before the meta file is written.
    """
    if not inputs:
        raise ShardError("merge: no input files")
    metas = [read_meta(p) for p in inputs]
    first = metas[0]
    for path, meta in zip(inputs, metas):
        if meta["command"] != first["command"]:
            raise ShardError(f"{path}: a {meta['command']!r} result, but {inputs[0]} is a {first['command']!r} one")
        if meta["settings"] != first["settings"]:
            diff = sorted(k for k in set(meta["settings"]) | set(first["settings"])
                          if meta["settings"].get(k) != first["settings"].get(k))
            raise ShardError(f"{path}: settings differ from {inputs[0]}'s ({', '.join(diff)}); shards of one job "
                             f"must share every setting")
        if meta["shard"][1] != first["shard"][1]:
            raise ShardError(f"{path}: shard {meta['shard'][0]}/{meta['shard'][1]}, but {inputs[0]} is one of "
                             f"{first['shard'][1]}")
    count = first["shard"][1]
    have: dict[int, str] = {}
    for path, meta in zip(inputs, metas):
        i = meta["shard"][0]
        if i in have:
            raise ShardError(f"{path}: shard {i}/{count} given twice (also {have[i]})")
        have[i] = os.fspath(path)
    missing = sorted(set(range(count)) - set(have))
    if missing:
        raise ShardError(f"merge: shard(s) {', '.join(f'{i}/{count}' for i in missing)} missing "
                         f"(got {len(have)} of {count})")

    def checked(path, meta) -> Iterator[tuple[int, str, dict]]:
        n = 0
        for record in read_records(path):
            if not isinstance(record, dict) or not isinstance(record.get("index"), int):
                raise ShardError(f"{path}: record {n + 1} has no integer 'index'")
            # Sentences are dealt by index; in document mode, whole documents by document index.
            if record.get("document", record["index"]) % count != meta["shard"][0]:
                raise ShardError(f"{path}: record {record['index']} does not belong to shard "
                                 f"{meta['shard'][0]}/{count}")
            n += 1
            yield record["index"], os.fspath(path), record
        if n != meta["num_records"]:
            raise ShardError(f"{path}: {n} records but its meta file says {meta['num_records']}")

    summary = make_summary(first["command"], first["settings"])
    streams = [checked(p, m) for p, m in zip(inputs, metas)]
    writer = ResultWriter(output, first["command"], first["settings"], Shard(0, 1))
    with writer:
        for index, path, record in heapq.merge(*streams, key=lambda item: item[0]):
            if index <= writer._last:
                raise ShardError(f"{path}: record {index} is out of order or given twice")
            try:
                summary.add(record)
            except (KeyError, TypeError) as e:
                raise ShardError(f"{path}: record {index} lacks the field {e} of a {first['command']} "
                                 f"result") from None
            writer.write(record)
            if on_record is not None:
                on_record(record)
        result = with_qualifying_settings(summary.result(), first["settings"])
        if finalize is not None:
            finalize(result)
        writer.finish(result)
    return {"format": FORMAT, "command": first["command"], "shard": [0, 1], "num_records": writer.num_records,
            "settings": first["settings"], "summary": result, "merged_from": [os.fspath(p) for p in inputs]}
