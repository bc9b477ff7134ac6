"""A `gs://` workdir, on a local stand-in for the bucket (tests/train/bucket.py: no network).

`tgjax train --workdir gs://...` is accepted and writes every file of the run
to the bucket (checkpoints through orbax, which commits a step on a bucket by
writing `commit_success.txt` last; manifests, metrics.jsonl, TensorBoard
events and the vocabulary through `etils.epath`), and resumes from it. A save
cut at any stage of its commit, on a bucket or on a local disk, leaves the
last complete step as the one a resume finds. On several hosts the step to
resume from is process 0's choice (a real two-process run over localhost).
"""

from __future__ import annotations

import json
import shutil

import orbax.checkpoint as ocp
import pytest

from tgjax import cli
from tgjax.train.checkpoint import CheckpointStore
from tgjax.workdir import committed_steps, uncommitted_step, workdir_path

from .bucket import fake_bucket
from .helpers import TEST_OVERRIDES
from .test_checkpoint import abstract, fake_state

SMALL = [f"--config.{o}" for o in TEST_OVERRIDES] + ["--config.model.num_layers=1"]  # one layer: compiles faster
TIMINGS = ("steps_per_second", "tokens_per_second")


def _records(path) -> list[dict]:
    """metrics.jsonl's records without the timings (which differ between any two runs)."""
    return [{k: v for k, v in json.loads(line).items() if k not in TIMINGS}
            for line in path.read_text().splitlines()]


# -----------------------------------------------------------------------------
# The trainer on a bucket.


def test_tgjax_train_accepts_a_gs_workdir_writes_the_run_there_and_resumes_from_it(tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)  # pathlib would make gs://bucket/run a relative directory "gs:/bucket/run" here
    run = ["--config.training.num_steps=4", "--config.checkpointing.interval_steps=2",
           "--config.evaluation.interval_steps=2", "--config.logging.tensorboard=true"]
    with fake_bucket(tmp_path / "gcs", monkeypatch) as root:
        assert cli.main(["train", "--workdir", "gs://bucket/run", *SMALL, *run]) == 0
        first = capsys.readouterr().err
        assert "is a URL" not in first and "gcsfuse" not in first
        bucket = root / "bucket" / "run"
        for step in (2, 4):  # committed the bucket's way: in place, commit_success.txt last
            assert (bucket / "checkpoints" / str(step) / "commit_success.txt").is_file()
            assert (bucket / "checkpoint_manifests" / f"{step}.json").is_file()
        assert not list((bucket / "checkpoints").glob("*.orbax-checkpoint-tmp*"))
        assert (bucket / "vocab.json").is_file()
        assert [r["step"] for r in _records(bucket / "metrics.jsonl") if r["split"] == "train"] == [1, 2, 3, 4]
        assert list((bucket / "tensorboard").glob("events.out.tfevents.*"))
        assert not (tmp_path / "gs:").exists()

        assert cli.main(["train", "--workdir", "gs://bucket/run", *SMALL, *run,
                         "--config.training.num_steps=6"]) == 0
        assert "resuming from step 4 (gs://bucket/run/checkpoints/4)" in capsys.readouterr().err
        assert (bucket / "checkpoints" / "6" / "commit_success.txt").is_file()
        records = _records(bucket / "metrics.jsonl")
        assert [r["step"] for r in records if r["split"] == "train"] == [1, 2, 3, 4, 5, 6]
        assert len(list((bucket / "tensorboard").glob("events.out.tfevents.*"))) == 2  # one file per run

    # The same run on a local disk, without the break: the same records and the same vocabulary file, byte for byte.
    local = tmp_path / "local"
    assert cli.main(["train", "--workdir", str(local), *SMALL, *run, "--config.training.num_steps=6"]) == 0
    assert _records(local / "metrics.jsonl") == records
    assert (local / "vocab.json").read_bytes() == (bucket / "vocab.json").read_bytes()
    assert sorted(p.name for p in (local / "checkpoints").iterdir()) == ["2", "4", "6"]


def test_a_corrupt_step_on_a_bucket_is_moved_aside_through_epath(tmp_path, monkeypatch):
    with fake_bucket(tmp_path, monkeypatch) as root:
        store = CheckpointStore("gs://bucket/run", max_to_keep=3, keep_best=0, async_save=False)
        for step in (1, 2):
            store.save(step, fake_state(step), {"epoch": 0, "step": step}, {"note": step})
        store.wait()
        state_files = [p for p in (root / "bucket" / "run" / "checkpoints" / "2" / "state").rglob("*") if p.is_file()]
        largest = max(state_files, key=lambda p: p.stat().st_size)
        largest.write_bytes(largest.read_bytes()[:-1])
        restored, problems = store.restore_latest(abstract(fake_state(0)))
        store.close()
    assert restored.step == 1 and [p.step for p in problems] == [2]
    assert problems[0].moved_to.startswith("gs://bucket/run/checkpoints_corrupt/2-")
    (moved,) = (root / "bucket" / "run" / "checkpoints_corrupt").iterdir()
    assert (moved / "commit_success.txt").is_file()
    assert not (root / "bucket" / "run" / "checkpoint_manifests" / "2.json").exists()


# -----------------------------------------------------------------------------
# A save cut at every stage of its commit.
#
# A step is saved in stages; a process killed between two of them leaves the files of the stages before. On a
# bucket orbax writes the step in place: the step directory with its metadata, each item (written in parallel,
# each finished with its own commit_success.txt), then the step's own commit_success.txt; then this module's
# manifest (`<step>.json.tmp`, replaced to `<step>.json`). On a local disk the same items go to a temporary
# directory (`<step>.orbax-checkpoint-tmp...`), committed by renaming it. Each stage is made here from a whole
# saved step by taking away what comes after it.

STAGES = {
    # stage: (what is there, whether the step is complete)
    "directory made": ((), False),
    "state written": (("state",), False),
    "state and pipeline written, meta missing": (("state", "pipeline"), False),
    "every item written, no commit": (("state", "pipeline", "meta"), False),
    "committed, no manifest": (("state", "pipeline", "meta", "commit"), True),
    "committed, manifest half written": (("state", "pipeline", "meta", "commit", "manifest.tmp"), True),
    "committed, manifest written": (("state", "pipeline", "meta", "commit", "manifest"), True),
}


def _cut(workdir, step: int, kept: tuple[str, ...], on_bucket: bool) -> None:
    """Leaves step `step` of `workdir` (local paths) as a save cut after the stage that `kept` describes."""
    step_dir = workdir / "checkpoints" / str(step)
    manifest = workdir / "checkpoint_manifests" / f"{step}.json"
    if "manifest.tmp" in kept:
        manifest.rename(manifest.with_name(f"{step}.json.tmp"))
    elif "manifest" not in kept:
        manifest.unlink()
    for item in ("state", "pipeline", "meta"):
        if item not in kept:
            shutil.rmtree(step_dir / item)
    if "commit" in kept:
        return
    (step_dir / "commit_success.txt").unlink()
    if not on_bucket:  # never renamed: still under its temporary name
        step_dir.rename(step_dir.with_name(f"{step}.orbax-checkpoint-tmp-1234567890"))


@pytest.mark.parametrize("on_bucket", [True, False], ids=["bucket", "local"])
@pytest.mark.parametrize("stage", list(STAGES))
def test_a_save_cut_at_any_stage_resumes_from_the_last_complete_step(stage, on_bucket, tmp_path, monkeypatch):
    kept, complete = STAGES[stage]
    workdir = "gs://bucket/run" if on_bucket else str(tmp_path / "bucket" / "run")
    local = tmp_path / "bucket" / "run"
    with fake_bucket(tmp_path, monkeypatch):
        store = CheckpointStore(workdir, max_to_keep=5, keep_best=0, async_save=False)
        for step in (1, 2, 3):
            store.save(step, fake_state(step), {"epoch": 0, "step": step}, {"note": step})
        store.close()
        _cut(local, 3, kept, on_bucket)
        # What evaluation reads (it opens no CheckpointManager) lists the steps orbax lists, and says what an
        # unfinished one lacks.
        listed = committed_steps(workdir_path(workdir))
        orbax_lists = sorted(ocp.path.step.checkpoint_steps(f"{workdir}/checkpoints"))
        assert listed == orbax_lists == ([1, 2, 3] if complete else [1, 2])
        assert (uncommitted_step(workdir_path(workdir), 3) is None) == complete

        resumed = CheckpointStore(workdir, max_to_keep=5, keep_best=0, async_save=False)
        assert resumed.has_checkpoints()
        restored, problems = resumed.restore_latest(abstract(fake_state(0)))
        expected = 3 if complete else 2
        assert restored.step == expected and restored.meta == {"note": expected}
        assert restored.pipeline == {"epoch": 0, "step": expected}
        assert problems == []  # a cut save is not a corrupt step: it never was one
        assert not (local / "checkpoints_corrupt").exists()
        # The step can be saved again and is then the one a resume finds.
        resumed.save(4, fake_state(4), {"epoch": 0, "step": 4}, {"note": 4})
        resumed.close()
        again = CheckpointStore(workdir, max_to_keep=5, keep_best=0, async_save=False)
        assert again.restore_latest(abstract(fake_state(0)))[0].step == 4
        assert again.all_steps() == ([1, 2, 3, 4] if complete else [1, 2, 4])
        again.close()
    # What orbax does with the leftovers of a cut save when a store opens: removes them.
    leftovers = sorted(p.name for p in (local / "checkpoints").iterdir() if not p.name.isdigit())
    assert leftovers == []


def test_a_committed_step_that_lost_an_item_is_corrupt_and_the_previous_one_is_restored(tmp_path, monkeypatch):
    """Unlike a cut save, a committed step with an item gone (deleted from the bucket) is reported and set
    aside."""
    with fake_bucket(tmp_path, monkeypatch) as root:
        store = CheckpointStore("gs://bucket/run", max_to_keep=5, keep_best=0, async_save=False)
        for step in (1, 2):
            store.save(step, fake_state(step), {"epoch": 0, "step": step}, {})
        store.close()
        shutil.rmtree(root / "bucket" / "run" / "checkpoints" / "2" / "meta")
        resumed = CheckpointStore("gs://bucket/run", max_to_keep=5, keep_best=0, async_save=False)
        restored, problems = resumed.restore_latest(abstract(fake_state(0)))
        resumed.close()
    assert restored.step == 1 and [p.step for p in problems] == [2]
    assert "item(s) ['meta'] missing" in problems[0].reason


# -----------------------------------------------------------------------------
# The run's other files on a bucket.


def test_metrics_on_a_bucket_are_staged_locally_uploaded_and_truncated_on_resume(tmp_path, monkeypatch):
    from tgjax.train.metrics import MetricsWriter, read_metrics

    with fake_bucket(tmp_path, monkeypatch) as root:
        target = root / "bucket" / "run" / "metrics.jsonl"
        writer = MetricsWriter("gs://bucket/run", tensorboard=True, upload_seconds=3600)
        writer.write({"split": "train", "step": 1, "loss": 2.0})  # the first write uploads at once
        writer.write({"split": "train", "step": 2, "loss": 1.5})  # the next only after upload_seconds...
        assert [r["step"] for r in read_metrics("gs://bucket/run")[0]] == [1]
        writer.write({"split": "train", "step": 3, "loss": 1.0})
        staging = writer._staging
        assert staging is not None and (staging / "metrics.jsonl").is_file()  # written locally, every record
        writer.close()  # ...or at close
        assert not staging.exists()
        assert [r["step"] for r in read_metrics("gs://bucket/run")[0]] == [1, 2, 3]
        assert list((root / "bucket" / "run" / "tensorboard").glob("events.out.tfevents.*"))
        # A resume from step 2 drops step 3 from the bucket's file at once.
        MetricsWriter("gs://bucket/run", start_step=2, tensorboard=False).close()
        assert [json.loads(line)["step"] for line in target.read_text().splitlines()] == [1, 2]


def test_vocabularies_and_craft_demos_are_written_to_and_read_from_a_bucket(tmp_path, monkeypatch):
    import numpy as np

    from tgjax.data import craft_demos
    from tgjax.data.vocab import build_word_dictionary, load_vocabulary, train_sentencepiece
    from tgjax.envs import craft_rules as rules
    from tgjax.envs.craft_episodes import CraftDemos
    from tgjax.workdir import saved_vocabulary_path, vocabulary_fingerprint, workdir_path

    lines = ["(S (NP the dog) (VP barks))", "(S (NP a cat) (VP sleeps))"] * 20
    words = build_word_dictionary(lines)
    pieces = train_sentencepiece(lines, 40, byte_fallback=False, num_threads=1)
    # Two episodes of task A (one subtask) of random observations and actions: what the file holds, not what a
    # bot did (generate_demos, tests/envs/test_craft_bot.py), is what goes through the bucket.
    rng = np.random.default_rng(0)
    demos = CraftDemos.from_episodes(
        [(rng.integers(0, 256, (n, rules.OBS_SIZE)), rng.integers(0, rules.NUM_ACTIONS, n), np.array([n - 2]))
         for n in (5, 7)],
        task="A", subtasks=np.array([0], np.int32), env_version=rules.ENV_VERSION, max_steps=100,
        dense_reward=False, full_view=False, seed=0)
    with fake_bucket(tmp_path, monkeypatch) as root:
        run = workdir_path("gs://bucket/run")
        run.mkdir(parents=True, exist_ok=True)
        for vocab, name in ((words, "vocab.json"), (pieces, "vocab.model")):
            vocab.save(run / name)
            assert vocabulary_fingerprint(load_vocabulary(run / name)) == vocabulary_fingerprint(vocab)
        assert str(saved_vocabulary_path(run)) == "gs://bucket/run/vocab.json"
        assert (root / "bucket" / "run" / "vocab.model.json").is_file()  # the SentencePiece sidecar
        craft_demos.write_craft_demos(run / "demos" / "A.npz", demos)
        back = craft_demos.read_craft_demos(run / "demos" / "A.npz")
    assert back.task == "A" and (back.actions == demos.actions).all()
    assert (back.observations == demos.observations).all() and (back.offsets == demos.offsets).all()
    local = tmp_path / "local.json"
    words.save(local)
    assert local.read_bytes() == (root / "bucket" / "run" / "vocab.json").read_bytes()


def test_a_url_is_a_bucket_path_and_a_local_workdir_stays_a_local_absolute_path(tmp_path, monkeypatch):
    from etils import epath

    from tgjax.workdir import workdir_path

    monkeypatch.chdir(tmp_path)
    bucket = workdir_path("gs://bucket/run")
    assert isinstance(bucket, epath.Path) and str(bucket / "checkpoints" / "3") == "gs://bucket/run/checkpoints/3"
    assert workdir_path("runs/x") == tmp_path / "runs" / "x" and type(workdir_path("runs/x")) is type(tmp_path)
    assert not (tmp_path / "gs:").exists()


# -----------------------------------------------------------------------------
# Several hosts: one decision.


@pytest.mark.slow  # two JAX processes (34 s); the single-host cut-save tests above run in CI
def test_two_hosts_resume_from_process_0s_choice_even_when_the_other_host_sees_another(tmp_path, two_host_env):
    """Process 1 is made to see the newest checkpoint as corrupt (a host whose view of the bucket lags); both
    hosts still resume from it, because process 0 decides and broadcasts (tests/train/multihost_resume_run.py)."""
    from tests.train.processes import TWO_DEVICES, run_pair

    done = run_pair(["-m", "tests.train.multihost_resume_run", str(tmp_path / "run")],
                    {**two_host_env, **TWO_DEVICES}, timeout=300)
    runs = []
    for process, (code, out, err) in enumerate(done):
        assert code == 0, f"process {process}: {err[-3000:]}"
        runs.append([json.loads(line) for line in out.splitlines() if line.startswith("{")])
    for process, (first, second) in enumerate(runs):
        assert first["final_step"] == 4 and first["process"] == process
        assert second["distrusts"] == (process == 1)
        assert second["start_step"] == 4 and second["final_step"] == 6 and second["problems"] == []
    saved = sorted(p.name for p in (tmp_path / "run" / "checkpoints").iterdir())
    assert saved == ["2", "4", "6"] and not (tmp_path / "run" / "checkpoints_corrupt").exists()


