"""Sharded evaluation: which sentences a shard takes, and N shards merged = 1 shard, exactly."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.infer.test_perplexity import standard_blocks, write_proposals
from tests.infer.test_scoring import B, corpus, trained_workdir
from tgjax.data import corpora
from tgjax.eval.commands import main_merge, main_ppl, main_rerank, main_score
from tgjax.eval.shards import Shard, ShardError, default_shard, merge, parse_shard, shard_path, take
from tgjax.infer.perplexity import read_proposals
from tgjax.syntax import trees


def test_shard_arguments_and_paths():
    assert parse_shard("2/5") == Shard(2, 5) and str(Shard(2, 5)) == "2/5"
    for bad in ("5/5", "-1/2", "1", "a/b", "0/0"):
        with pytest.raises(ShardError):
            parse_shard(bad)
    assert [k for k, _ in take("abcdefg", Shard(1, 3))] == [1, 4]
    assert shard_path("out.jsonl", Shard(0, 1)) == Path("out.jsonl")
    assert shard_path("r/out.jsonl", Shard(1, 3)) == Path("r/out.shard-00001-of-00003.jsonl")
    assert shard_path("out", Shard(1, 3)) == Path("out.shard-00001-of-00003")
    assert shard_path("o-{shard}-{num_shards}.jsonl", Shard(1, 3)) == Path("o-1-3.jsonl")
    assert default_shard() == Shard(0, 1)  # one process


def test_document_files_are_sharded_by_document(tmp_path):
    blocks = [[t] for t in corpus()[:5]]
    path = write_proposals(tmp_path / "d.txt", blocks, documents=[0, 2, 3])
    got = [(b.index, b.document) for b in read_proposals(path, documents=True, shard=(1, 2))]
    assert got == [(2, 1)]  # documents 0 = blocks 0-1, 1 = block 2, 2 = blocks 3-4
    got = [(b.index, b.document) for b in read_proposals(path, documents=True, shard=(0, 2))]
    assert got == [(0, 0), (1, 0), (3, 2), (4, 2)]


def _run_shard(main, args: list[str], out: Path, i: int, n: int) -> Path:
    assert main([*args, "--shard", f"{i}/{n}", "-o", str(out)]) == 0
    return shard_path(out, Shard(i, n))


def _run_sharded(main, args: list[str], out: Path, n: int) -> list[Path]:
    return [_run_shard(main, args, out, i, n) for i in range(n)]


def test_three_shards_merged_equal_one(tmp_path):
    workdir, _ = trained_workdir()
    model = ["--workdir", str(workdir), "--batch-size", str(B), "--quiet"]
    treebank = tmp_path / "t.txt"
    corpora.write_treebank(treebank, list(corpus()[:11]))
    blocks = standard_blocks(7)
    proposals = write_proposals(tmp_path / "p.txt", blocks)
    gold = tmp_path / "gold.txt"
    trees.write_treebank([b[1] for b in blocks], gold)

    jobs = {
        "score": (main_score, [*model, "--input", str(treebank), "--per-token", "--surprisal"]),
        "ppl": (main_ppl, [*model, "--proposals", str(proposals), "--all-logps"]),
        "rerank": (main_rerank, [*model, "--proposals", str(proposals)]),
    }
    for name, (main, args) in jobs.items():
        one = tmp_path / f"{name}_one.jsonl"
        assert main([*args, "-o", str(one)]) == 0
        parts = _run_sharded(main, args, tmp_path / f"{name}.jsonl", 3)
        assert sum(len(p.read_text().splitlines()) for p in parts) == len(one.read_text().splitlines())
        merged = tmp_path / f"{name}_merged.jsonl"
        extra = ["--gold", str(gold), "--trees", str(tmp_path / "best_merged.txt")] if name == "rerank" else []
        assert main_merge([str(p) for p in reversed(parts)] + ["-o", str(merged), "--quiet", *extra]) == 0
        assert merged.read_text() == one.read_text()
        meta_one = json.loads(Path(f"{one}.meta.json").read_text())
        meta_merged = json.loads(Path(f"{merged}.meta.json").read_text())
        summary_merged = meta_merged["summary"]
        if name == "rerank":
            f1 = summary_merged.pop("f1")
            for key in ("recall", "precision", "complete_match", "evalb_sentences", "evalb_error_sentences",
                        "evalb_skip_sentences"):
                summary_merged.pop(key)
            assert main([*args, "-o", str(one), "--gold", str(gold), "--trees", str(tmp_path / "best_one.txt")]) == 0
            assert json.loads(Path(f"{one}.meta.json").read_text())["summary"]["f1"] == f1
            assert (tmp_path / "best_one.txt").read_text() == (tmp_path / "best_merged.txt").read_text()
        assert summary_merged == meta_one["summary"]  # exact: float sums are order-independent
        assert meta_merged["settings"] == meta_one["settings"] and meta_merged["num_records"] == meta_one["num_records"]


def test_merge_refuses_what_is_not_one_whole_job(tmp_path, capsys):
    workdir, _ = trained_workdir()
    treebank = tmp_path / "t.txt"
    corpora.write_treebank(treebank, list(corpus()[:5]))
    args = ["--workdir", str(workdir), "--batch-size", str(B), "--quiet", "--input", str(treebank)]
    parts = _run_sharded(main_score, args, tmp_path / "s.jsonl", 3)
    with pytest.raises(ShardError, match="shard.* 2/3 missing"):
        merge(parts[:2], None)
    with pytest.raises(ShardError, match="given twice"):
        merge([parts[0], parts[0], parts[1], parts[2]], None)
    per_token = _run_shard(main_score, [*args, "--per-token"], tmp_path / "pt.jsonl", 2, 3)  # the one merged
    with pytest.raises(ShardError, match="settings differ .*per_token"):
        merge([parts[0], parts[1], per_token], None)
    two = _run_shard(main_score, args, tmp_path / "two.jsonl", 1, 2)
    with pytest.raises(ShardError, match="one of 3"):
        merge([parts[0], parts[1], two], None)
    # A record appended after the meta file was written: the counts disagree.
    last = json.loads(parts[2].read_text().splitlines()[-1])
    with open(parts[2], "a") as f:
        f.write(json.dumps({**last, "index": 5}) + "\n")
    with pytest.raises(ShardError, match="2 records but its meta file says 1"):
        merge(parts, tmp_path / "m.jsonl")
    with open(parts[2], "a") as f:
        f.write(json.dumps({"index": 8}) + "\n")
    with pytest.raises(ShardError, match="record 8 lacks the field 'logp'"):
        merge(parts, tmp_path / "m.jsonl")
    # A shard cut short has no meta file.
    Path(f"{parts[1]}.meta.json").unlink()
    with pytest.raises(ShardError, match="did not finish"):
        merge(parts, None)
    assert main_merge([str(p) for p in parts]) == 2
    assert "did not finish" in capsys.readouterr().err
    assert main_score([*args, "--shard", "0/2"]) == 2  # a shard needs --output
    assert "give --output" in capsys.readouterr().err
