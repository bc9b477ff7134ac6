"""The launch scripts under --dry-run: the commands they would run on the hosts are ones tgjax accepts.

Nothing here touches a cloud: `--dry-run` prints each command, shell-quoted,
one per line. The `tgjax ...` lines are then handed to tgjax's own parsers
(`tgjax info` resolves a train command's config and overrides; an eval command
must get past argument parsing and fail only on the missing workdir), so a
renamed config key or eval flag breaks this test, not a TPU job.
"""

from __future__ import annotations

import json
import os
import shlex
import shutil
import signal
import subprocess
from pathlib import Path

import pytest

from tgjax import cli

REPO = Path(__file__).resolve().parents[1]
LAUNCH = REPO / "launch"

pytestmark = pytest.mark.skipif(shutil.which("bash") is None, reason="the launch scripts need bash")


def dry_run(script: str, *args: str, **env: str) -> list[str]:
    """The lines a launch script prints under --dry-run (it must exit 0)."""
    done = subprocess.run(["bash", str(LAUNCH / script), "--dry-run", *args], cwd=REPO,
                          env={"PATH": "/usr/bin:/bin", "HOME": "/home/user", **env},
                          capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    return done.stdout.splitlines()


def tgjax_line(lines: list[str], subcommand: str) -> list[str]:
    """The arguments after `.venv/bin/tgjax` of the one printed `tgjax SUBCOMMAND` command."""
    found = [shlex.split(line) for line in lines if line.startswith(".venv/bin/tgjax " + subcommand)]
    assert len(found) == 1, lines
    return found[0][1:]


def test_tpu_train_runs_host_train_on_every_worker():
    (line,) = dry_run("tpu_train.sh", "--", "--config.training.num_steps=7", WORKDIR="gs://bucket/run")
    argv = shlex.split(line)
    assert argv[:5] == ["gcloud", "compute", "tpus", "tpu-vm", "ssh"] and "--worker=all" in argv
    remote = next(a for a in argv if a.startswith("--command=")).removeprefix("--command=")
    assert "export DISTRIBUTED=1;" in remote and "export WORKDIR=gs://bucket/run;" in remote
    assert remote.endswith("bash launch/host_train.sh --config.training.num_steps=7")


def test_host_train_command_is_one_tgjax_accepts(capsys):
    lines = dry_run("host_train.sh", "--", "--config.training.num_steps=7", CONFIG="tg_bllip",
                    WORKDIR="gs://bucket/tgjax/tg_bllip", DATA_URI="/data/bllip", TRAIN_FILE="train.txt",
                    VALID_FILE="valid.txt", DISTRIBUTED="1", DETACH="0")
    # The trainer gets the gs:// WORKDIR itself (orbax and etils.epath write the bucket): nothing is mounted.
    assert not any("gcsfuse" in line or "/gcs/" in line for line in lines), lines
    argv = tgjax_line(lines, "train")
    workdir = argv[argv.index("--workdir") + 1]
    assert workdir == "gs://bucket/tgjax/tg_bllip"
    assert "--config.distributed.initialize=true" in argv
    assert "--config.data.train_path=/data/bllip/train.txt" in argv
    # `tgjax info` resolves the same config and overrides: an unknown key would exit 2 here.
    info = [a for a in argv[1:] if a != "--workdir" and a != workdir]
    assert cli.main(["info", *info]) == 0
    out = capsys.readouterr().out
    assert "251,887,616" in out


def _eval_args(command: str, tmp_path: Path) -> list[str]:
    """Arguments that get `tgjax eval COMMAND` past its own inputs (without ../shared), up to the workdir."""
    from tests.eval.test_parse import blimp_file, tiny_suite

    if command == "sg":
        suites = tmp_path / "suites"
        suites.mkdir()
        (suites / "agreement.json").write_text(json.dumps(tiny_suite()))
        return ["--suites", str(suites), "--word-beam", "5"]
    if command == "blimp":
        return ["--data", str(blimp_file(tmp_path / "blimp.jsonl")), "--limit", "2"]
    if command == "parse":
        return ["--treebank", "builtin"]
    # score/ppl/rerank read their input first (its POS-tag decision is made before any model loads).
    trees = tmp_path / "trees.txt"
    trees.write_text("(S (NP (DT the) (NN dog)) (VP (VBZ barks)))\n")
    return {"score": ["--input", str(trees)], "ppl": ["--proposals", str(trees)],
            "rerank": ["--proposals", str(trees)]}[command]


@pytest.mark.parametrize("command, ext", [("sg", "json"), ("blimp", "jsonl"), ("parse", "txt"), ("score", "jsonl"),
                                          ("ppl", "jsonl"), ("rerank", "jsonl")])
def test_host_eval_commands_parse_and_name_their_shard(command, ext, tmp_path, capsys):
    lines = dry_run("host_eval.sh", command, *_eval_args(command, tmp_path), WORKDIR=str(tmp_path / "run"),
                    SHARD_INDEX="0", SHARD_COUNT="4")
    argv = tgjax_line(lines, "eval")
    assert argv[:2] == ["eval", command]
    assert argv[argv.index("--shard") + 1] == "0/4"
    assert argv[argv.index("--output") + 1] == str(tmp_path / "run" / "eval" / f"{command}.{ext}")
    # Past argument parsing and its own inputs, the command fails on the empty workdir (exit 2, named); the
    # script makes the output directory first (`mkdir -p`, a dry-run line), as done here.
    assert ["mkdir", "-p", str(tmp_path / "run" / "eval")] in [line.split() for line in lines]
    (tmp_path / "run" / "eval").mkdir(parents=True)
    code = cli.main(argv)
    err = capsys.readouterr().err
    assert code == 2 and "usage:" not in err, err
    assert f"workdir {str(tmp_path / 'run')!r} holds no checkpoints" in err


def test_host_eval_reads_a_bucket_run_directly_and_mounts_only_for_its_outputs():
    lines = dry_run("host_eval.sh", "blimp", WORKDIR="gs://bucket/run", SHARD_INDEX="1", SHARD_COUNT="2")
    argv = tgjax_line(lines, "eval")
    assert argv[argv.index("--workdir") + 1] == "gs://bucket/run"
    assert argv[argv.index("--output") + 1] == "/home/user/gcs/bucket/run/eval/blimp.jsonl"
    mounts = [line for line in lines if line.startswith("gcsfuse")]
    assert mounts == ["gcsfuse --implicit-dirs bucket /home/user/gcs/bucket"]  # for the output directory only


def test_host_eval_refuses_an_unknown_command():
    done = subprocess.run(["bash", str(LAUNCH / "host_eval.sh"), "--dry-run", "train"], cwd=REPO,
                          env={"PATH": "/usr/bin:/bin", "HOME": "/home/user", "WORKDIR": "/tmp/x"},
                          capture_output=True, text=True, timeout=60)
    assert done.returncode == 2 and "expected an eval command" in done.stderr


def test_every_script_has_a_dry_run():
    for script in ("tpu_create.sh", "tpu_setup.sh", "tpu_logs.sh", "tpu_stop.sh", "tpu_delete.sh", "gpu_train.sh"):
        assert dry_run(script, WORKDIR="gs://bucket/run", PROJECT="p"), script


def test_help_is_each_scripts_leading_comment_block():
    for script in sorted(LAUNCH.glob("*.sh")):
        if script.name == "common.sh":
            continue
        done = subprocess.run(["bash", str(script), "--help"], cwd=REPO, capture_output=True, text=True, timeout=60,
                              env={"PATH": "/usr/bin:/bin", "HOME": "/home/user"})
        assert done.returncode == 0, (script.name, done.stderr)
        block = []
        for line in script.read_text().splitlines()[1:]:
            if not line.startswith("#"):
                break
            block.append(line[2:] if line.startswith("# ") else line[1:])
        assert done.stdout.splitlines() == block, script.name


def test_host_install_adds_gcsfuse_on_tpu_hosts_only():
    """gcsfuse is for evaluation only (host_eval.sh mounts a gs:// WORKDIR; training writes it directly)."""
    tpu = dry_run("host_install.sh", ACCEL="tpu")
    assert any("'jax[tpu]'" in line for line in tpu)
    assert "sudo apt-get install -y -q gcsfuse" in tpu
    cuda = dry_run("host_install.sh", ACCEL="cuda12")
    assert any("'jax[cuda12]'" in line for line in cuda)
    assert not any("gcsfuse" in line for line in cuda)
    assert "sudo apt-get install -y -q gcsfuse" in dry_run("host_install.sh", ACCEL="cuda12", GCSFUSE="1")


@pytest.mark.parametrize("accel", ["tpu", "cuda12", "cpu"])
def test_host_install_adds_the_cloud_storage_clients_that_a_gs_workdir_is_written_with(accel):
    (install,) = [line for line in dry_run("host_install.sh", ACCEL=accel) if " install " in line and " -e ." in line]
    assert install.endswith(" gcsfs google-cloud-storage"), install
    (install,) = [line for line in dry_run("host_install.sh", ACCEL=accel, GCS="0")
                  if " install " in line and " -e ." in line]
    assert "gcsfs" not in install and "google-cloud-storage" not in install


def _train_lines(script: str, **env: str) -> list[str]:
    return dry_run(script, "--", "--config.training.num_steps=7", CONFIG="tiny", WORKDIR="gs://bucket/tgjax/tiny",
                   **env)


@pytest.mark.parametrize("script, env", [("host_train.sh", {"DETACH": "0"}), ("host_train.sh", {"DETACH": "1"}),
                                         ("gpu_train.sh", {}), ("tpu_train.sh", {})])
def test_no_training_script_mounts_the_bucket_of_a_gs_workdir(script, env):
    lines = _train_lines(script, **env)
    assert not any("gcsfuse" in line or "mountpoint" in line or "GCS_MOUNT" in line or "/gcs/" in line
                   for line in lines), lines
    if script == "tpu_train.sh":  # what the hosts run is host_train.sh, with the URL as it is
        (line,) = lines
        assert "export WORKDIR=gs://bucket/tgjax/tiny;" in line and line.endswith(
            "bash launch/host_train.sh --config.training.num_steps=7'")
        return
    (train,) = [shlex.split(line.split(" >>")[0]) for line in lines if "/tgjax train " in line]
    assert train[train.index("--workdir") + 1] == "gs://bucket/tgjax/tiny"


def _host_train_with_stand_ins(tmp_path: Path, python_exit: int) -> subprocess.CompletedProcess:
    """host_train.sh (in the foreground) for a gs:// WORKDIR, with a stand-in venv: `python` exits
    `python_exit` (0: the Cloud Storage clients are installed), `tgjax` notes its arguments."""
    venv = tmp_path / "venv" / "bin"
    venv.mkdir(parents=True)
    (venv / "python").write_text(f"#!/usr/bin/env bash\nexit {python_exit}\n")
    (venv / "tgjax").write_text('#!/usr/bin/env bash\nprintf "%s\\n" "$@" >"$ARGS"\n')
    for stand_in in venv.iterdir():
        stand_in.chmod(0o755)
    return subprocess.run(["bash", str(LAUNCH / "host_train.sh")], cwd=REPO, capture_output=True, text=True,
                          timeout=60, env={"PATH": "/usr/bin:/bin", "HOME": str(tmp_path), "CONFIG": "tiny",
                                           "WORKDIR": "gs://bucket/run", "VENV": str(tmp_path / "venv"),
                                           "DETACH": "0", "ARGS": str(tmp_path / "args")})


def test_host_train_hands_the_gs_workdir_to_the_trainer_and_needs_the_cloud_storage_clients(tmp_path):
    done = _host_train_with_stand_ins(tmp_path, python_exit=0)
    assert done.returncode == 0, done.stderr
    args = (tmp_path / "args").read_text().splitlines()
    assert args[:2] == ["train", "--config"] and args[args.index("--workdir") + 1] == "gs://bucket/run"
    assert not (tmp_path / "gcs").exists()
    (tmp_path / "args").unlink()
    shutil.rmtree(tmp_path / "venv")
    done = _host_train_with_stand_ins(tmp_path, python_exit=1)
    assert done.returncode == 2 and not (tmp_path / "args").exists()
    assert "needs gcsfs and google-cloud-storage" in done.stderr and "launch/host_install.sh" in done.stderr


def _old_run(tmp_path: Path, on_term: str) -> tuple[subprocess.Popen, Path]:
    """A stand-in for a run host_train.sh started before: its own process group, its pid in LOG_DIR's pid file,
    `on_term` its SIGTERM trap. A thread reaps it, as init would the real (detached) run."""
    import threading

    pidfile = tmp_path / "logs" / "train-tiny.pid"
    pidfile.parent.mkdir()
    script = f'echo $$ >"$0"; trap {shlex.quote(on_term)} TERM; while true; do sleep 0.1; done'
    old = subprocess.Popen(["bash", "-c", script, str(pidfile)], start_new_session=True,
                           env={"PATH": "/usr/bin:/bin", "EVENTS": str(tmp_path / "events")})
    threading.Thread(target=old.wait, daemon=True).start()
    for _ in range(100):
        if pidfile.exists() and pidfile.read_text().strip():
            break
        subprocess.run(["sleep", "0.05"])
    return old, pidfile


def _restart(tmp_path: Path, **env: str) -> subprocess.CompletedProcess:
    """host_train.sh RESTART=1 (detached), with a stand-in `tgjax` that notes that it started."""
    fake_tgjax = tmp_path / "venv" / "bin" / "tgjax"
    fake_tgjax.parent.mkdir(parents=True)
    fake_tgjax.write_text('#!/usr/bin/env bash\necho "new-started" >>"$EVENTS"\n')
    fake_tgjax.chmod(0o755)
    return subprocess.run(["bash", str(LAUNCH / "host_train.sh")], cwd=REPO, capture_output=True, text=True,
                          timeout=120, env={"PATH": "/usr/bin:/bin", "HOME": str(tmp_path), "CONFIG": "tiny",
                                            "WORKDIR": str(tmp_path / "run"), "LOG_DIR": str(tmp_path / "logs"),
                                            "VENV": str(tmp_path / "venv"), "RESTART": "1",
                                            "EVENTS": str(tmp_path / "events"), **env})


def _events(tmp_path: Path) -> list[str]:
    for _ in range(100):  # the new run is detached: give it a moment to note its start
        events = (tmp_path / "events").read_text().split() if (tmp_path / "events").exists() else []
        if "new-started" in events:
            break
        subprocess.run(["sleep", "0.05"])
    return events


def test_restart_waits_for_the_old_run_to_save_and_exit_before_starting(tmp_path):
    # The old run takes 2 s after SIGTERM (its checkpoint) before it exits.
    old, _ = _old_run(tmp_path, 'echo old-term >>"$EVENTS"; sleep 2; echo old-exited >>"$EVENTS"; exit 0')
    done = _restart(tmp_path)
    assert done.returncode == 0, done.stderr
    assert old.poll() is not None
    assert _events(tmp_path) == ["old-term", "old-exited", "new-started"]
    assert f"waiting for train-tiny (pid {old.pid}) to save its checkpoint and exit" in done.stdout
    assert f"train-tiny (pid {old.pid}) has exited after" in done.stdout and "started train-tiny" in done.stdout


def test_restart_gives_up_with_a_message_when_the_old_run_does_not_exit(tmp_path):
    old, pidfile = _old_run(tmp_path, "")  # SIGTERM ignored
    try:
        done = _restart(tmp_path, STOP_TIMEOUT="2")
        assert done.returncode == 1
        assert (f"train-tiny (pid {old.pid}) has not exited 2 s after SIGTERM; not starting a new run beside it"
                in done.stderr)
        assert old.poll() is None and pidfile.read_text().strip() == str(old.pid)
        assert not (tmp_path / "events").exists()  # no new run
    finally:
        os.killpg(old.pid, signal.SIGKILL)
