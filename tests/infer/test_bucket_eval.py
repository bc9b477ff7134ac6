"""Evaluation straight from a `gs://` workdir, on the local stand-in for a bucket (tests/train/bucket.py: no
network): `tgjax.load("gs://...")` and `tgjax eval ... --workdir gs://...` read the checkpoint, its meta and
manifest, and the vocabulary where they are, and only steps whose save was committed are steps.

One tiny TG run is trained into the fake bucket for the whole module; each test reads it, or a copy of it.
"""

from __future__ import annotations

import json
import shutil

import numpy as np
import pytest

import tgjax
from tests.train.bucket import fake_bucket
from tests.train.helpers import small_config
from tgjax import cli
from tgjax.infer.beam import BeamConfig
from tgjax.infer.loading import CheckpointError, resolve_step
from tgjax.workdir import Family, family_of, read_lines_of, workdir_path

RUN = "gs://bucket/run"
SENTENCE = ["the", "dog", "barks"]
SMALL_BEAM = BeamConfig(word_beam=4, action_beam=16, fast_track=1)


@pytest.fixture(scope="module")
def bucket(tmp_path_factory):
    """The fake bucket's root (gs://bucket/run is root/bucket/run), open for the module, with a run of 4 steps
    (checkpoints 2 and 4, validation at both) in gs://bucket/run; the current directory is a scratch one, so
    that a URL misread as a local path would show up as a directory `gs:` there."""
    from tgjax.train.loop import train

    root = tmp_path_factory.mktemp("gcs")
    scratch = tmp_path_factory.mktemp("cwd")
    with pytest.MonkeyPatch.context() as patch, fake_bucket(root, patch):
        patch.chdir(scratch)
        train(small_config("training.num_steps=4", "checkpointing.interval_steps=2", "evaluation.interval_steps=2",
                           "checkpointing.async_save=false"), RUN, quiet=True)
        yield root
        assert not (scratch / "gs:").exists()


def _copy(bucket, name: str) -> str:
    """A copy of the run, in the bucket as gs://bucket/NAME; its URL."""
    shutil.copytree(bucket / "bucket" / "run", bucket / "bucket" / name)
    return f"gs://bucket/{name}"


def test_a_bucket_run_scores_a_sentence_as_its_local_copy_does(bucket, tmp_path):
    local = tmp_path / "run"
    shutil.copytree(bucket / "bucket" / "run", local)
    remote, copied = tgjax.load(RUN, step="latest"), tgjax.load(local, step="latest")
    assert (remote.workdir, remote.step, remote.family) == (RUN, 4, "lm")
    assert remote.meta == copied.meta and copied.step == 4
    assert remote.describe() == "tg from gs://bucket/run step 4"
    # the host beam (it compiles in a fraction of the device engine's time; either reads the same parameters)
    (from_bucket,), (from_disk,) = (m.scorer(beam=SMALL_BEAM, search="host").search([SENTENCE])
                                    for m in (remote, copied))
    assert np.isfinite(from_bucket.log_prob) and from_bucket.log_prob < 0
    assert from_bucket.log_prob == from_disk.log_prob
    np.testing.assert_array_equal(from_bucket.surprisals, from_disk.surprisals)
    best = tgjax.load(RUN)  # the best step by validation loss, from the newest committed step's meta
    assert best.step == remote.meta["best_step"]


def test_tgjax_eval_score_reads_a_gs_workdir(bucket, tmp_path, capsys):
    trees = tmp_path / "trees.txt"
    trees.write_text("(S (NP the dog) (VP barks))\n(S (NP a cat) (VP sleeps))\n")
    output = tmp_path / "scores.jsonl"
    assert cli.main(["eval", "score", "--workdir", RUN, "--step", "latest", "--input", str(trees),
                     "-o", str(output)]) == 0
    err = capsys.readouterr().err
    assert "is a URL" not in err and "gcsfuse" not in err
    records = [json.loads(line) for line in output.read_text().splitlines()]
    scored = [r for r in records if "logp" in r]
    assert len(scored) == 2 and all(np.isfinite(r["logp"]) and r["logp"] < 0 for r in scored)
    (model,) = json.loads((tmp_path / "scores.jsonl.meta.json").read_text())["settings"]["models"]
    assert (model["workdir"], model["step"]) == (RUN, 4)
    assert family_of(RUN) == Family("lm", None, "tg")  # what the commands check before loading anything


def test_a_word_list_on_a_bucket_is_read_and_its_bad_bytes_named_as_on_a_disk(bucket):
    words = workdir_path(RUN) / "words.txt"
    words.write_bytes(b"the\nfox\n")
    assert read_lines_of(words) == ["the", "fox"]
    words.write_bytes(b"the\nfox\ncaf\xe9\n")
    with pytest.raises(ValueError, match=r"^gs://bucket/run/words.txt:3:4: expected utf-8 text, found the byte 0xe9"):
        read_lines_of(words)
    words.unlink()


def test_a_save_cut_before_its_commit_marker_is_never_picked_and_asked_for_says_so(bucket):
    cut = _copy(bucket, "cut")
    (bucket / "bucket" / "cut" / "checkpoints" / "4" / "commit_success.txt").unlink()  # every item, no commit
    assert resolve_step(cut, "latest")[0] == 2
    assert tgjax.load(cut, step="latest").step == 2 and tgjax.load(cut).step == 2
    with pytest.raises(CheckpointError) as error:
        tgjax.load(cut, step=4)
    assert str(error.value) == (
        "checkpoint step 4 in gs://bucket/cut was never committed (its save did not finish): "
        "gs://bucket/cut/checkpoints/4/commit_success.txt is missing (orbax writes it last, once every item is "
        "written); committed steps: [2]")
    # The same files through a mount of the bucket (a local path): the same steps.
    mounted = bucket / "bucket" / "cut"
    assert resolve_step(mounted, "latest")[0] == 2
    with pytest.raises(CheckpointError, match=r"step 4 .* never committed .*4/commit_success.txt is missing"):
        resolve_step(mounted, 4)
