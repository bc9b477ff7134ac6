"""The five CFLs × {Tf, Tf+Sup, Tf+Nd} of DuSell & Chiang (ICLR 2024, §6, Appendix D), in one timed run.

Each (task, model) is one `tgjax train --config configs/stack_cfl.py:TASK,MODEL`
process, all started at once (on one GPU each process gets
XLA_PYTHON_CLIENT_MEM_FRACTION of its memory). The set-up is the paper's
except where a time slot forces a reduction, and each reduction is a flag
(printed, and written into the JSON):

  * one trial per (task, model) with a fixed learning rate (the paper: the best
    of 10 trials, each with a log-uniform draw from [5e-4, 1e-2]);
  * `--train-size` / `--valid-size` strings (the paper: 10,000 / 1,000);
  * a wall-clock budget per trial (`training.max_train_seconds`): the trial
    ends after the first epoch that finishes past it (the paper: up to 200
    epochs, early stopping after 10 without improvement), and the best epoch
    by validation Δ is tested, as in the paper;
  * `--test-per-length` test strings per length 40–100 (the paper: 100);
  * time axes padded to multiples of `--length-bucket` (no number changes:
    the models are causal) and the dVPDA scan in `--nd-blocks` static blocks
    (no number changes), so that each process compiles a few programs only.

Writes into --out (at most 4 files):
  cfl_grid.json            every job: command, status, seconds, and its results.json (validation, test, per length)
  cfl_grid_table.md        task × model test cross-entropy difference (nats/symbol), beside the paper's findings
  cfl_grid_by_length.png   test Δ by string length, one panel per task (the right half of the paper's Fig. 2)
  cfl_grid_logs.txt        the last lines of every job's log
Job workdirs (checkpoints, TensorBoard logs) go to --workdir-root (default: a fresh temporary directory).

    python benchmarks/cfl_grid.py --out OUT                       # GPU: ~5 minutes wall, all 15 jobs at once
    python benchmarks/cfl_grid.py --out OUT --platform cpu --tiny # a smoke test: a few steps per job
    python benchmarks/cfl_grid.py --out OUT --platform cpu --parallel 2 --budget-s 1800 --deadline-s 0 ...

The paper gives its CFL results only as plots (Fig. 2) and states, in §6
and the caption, which model beats which; those orderings are the "paper"
column, and "this trial" says whether this run's one trial per cell orders
the models so (no verdict: `benchmarks/cfl_grid_seeds.py` judges them over
seeds).
"""

from __future__ import annotations

import argparse
import json
import math
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
TASKS = ("marked_reversal", "unmarked_reversal", "padded_reversal", "dyck", "hardest_cfl")
TASK_LABELS = {"marked_reversal": "w#wᴿ", "unmarked_reversal": "wwᴿ", "padded_reversal": "waᵖwᴿ",
               "dyck": "Dyck", "hardest_cfl": "Hardest CFL"}
MODELS = ("tf", "tf_sup", "tf_nd")
MODEL_LABELS = {"tf": "Tf", "tf_sup": "Tf+Sup", "tf_nd": "Tf+Nd"}
# The orderings §6 and Fig. 2's caption state, per task: (text, the models it compares, the check on one run's
# results). One trial per cell gives no spread, so this table says only whether this trial orders the models
# so; `benchmarks/cfl_grid_seeds.py` judges the claims over seeds.
def _lower(model: str, *others: str, within: bool = False):
    def check(results: dict, task: str) -> bool:
        value = (lambda m: _length_range_delta(results[(task, m)], within=True)) if within else (
            lambda m: results[(task, m)]["test"]["cross_entropy_difference"])
        return all(value(model) < value(other) for other in others)
    label = " < ".join([MODEL_LABELS[model], ", ".join(MODEL_LABELS[o] for o in others)])
    return label + (" (≤ 80)" if within else ""), (model, *others), check


def _overfits(results: dict, task: str) -> bool:
    """Tf+Nd's rise past the training lengths is larger than Tf's."""
    def rise(m):
        return (_length_range_delta(results[(task, m)], within=False)
                - _length_range_delta(results[(task, m)], within=True))
    return rise("tf_nd") > rise("tf")


_SUP_BEATS_TF = _lower("tf_sup", "tf")
_OVERFITS = ("Tf+Nd rises more past 80 than Tf", ("tf", "tf_nd"), _overfits)
PAPER_FINDINGS = {
    "marked_reversal": (_SUP_BEATS_TF, _lower("tf_nd", "tf"), _OVERFITS),
    "unmarked_reversal": (_SUP_BEATS_TF, _lower("tf_nd", "tf", "tf_sup")),
    "padded_reversal": (_SUP_BEATS_TF, _lower("tf_nd", "tf", "tf_sup")),
    "dyck": (_SUP_BEATS_TF, _OVERFITS),
    "hardest_cfl": (_lower("tf_nd", "tf", "tf_sup"), _lower("tf_nd", "tf", "tf_sup", within=True)),
}
MAX_TRAIN_LENGTH = 80


def job_command(task: str, model: str, workdir: Path, args) -> list[str]:
    """The `tgjax train` command line of one (task, model)."""
    overrides = {
        "training.learning_rate": args.lr,
        "training.max_train_seconds": args.budget_s,
        "training.epochs": args.epochs,
        "data.train_size": args.train_size,
        "data.valid_size": args.valid_size,
        "data.test_per_length": args.test_per_length,
        "data.length_bucket": args.length_bucket,
        "training.seed": args.seed,
        "logging.interval_steps": args.log_every,
    }
    if model == "tf_nd" and args.nd_blocks:
        overrides["architecture.nd_num_blocks"] = args.nd_blocks
    if args.test_lengths:
        overrides["data.test_lengths"] = args.test_lengths
    cmd = [sys.executable, "-m", "tgjax.cli", "train", "--config", f"configs/stack_cfl.py:{task},{model}",
           "--workdir", str(workdir)]
    for key, value in overrides.items():
        cmd.append(f"--config.{key}={value}")
    return cmd + [f"--config.{kv}" for kv in args.set]


def job_env(args, model: str) -> dict[str, str]:
    env = dict(os.environ)
    env["PYTHONPATH"] = str(REPO) + os.pathsep + env.get("PYTHONPATH", "")
    env["PYTHONUNBUFFERED"] = "1"
    if args.platform == "cpu" or model in args.cpu_models:
        env["JAX_PLATFORMS"] = "cpu"
        if args.platform != "cpu":  # beside the GPU jobs: one core each, so that 16 cores go round
            env["XLA_FLAGS"] = (env.get("XLA_FLAGS", "")
                                + " --xla_cpu_multi_thread_eigen=false intra_op_parallelism_threads=1").strip()
    else:
        env["XLA_PYTHON_CLIENT_MEM_FRACTION"] = str(args.mem_fraction)
        if args.no_autotune:  # tiny matrices: cuBLAS's heuristics are fine, autotuning only costs compile time
            env["XLA_FLAGS"] = (env.get("XLA_FLAGS", "") + " --xla_gpu_autotune_level=0").strip()
    return env


def run_jobs(jobs: list[dict], args) -> None:
    """Starts up to --parallel jobs at a time; kills what still runs at --deadline-s (0: no deadline)."""
    started = time.perf_counter()
    pending, running = list(jobs), []
    last_report = 0.0
    while pending or running:
        while pending and len(running) < args.parallel:
            job = pending.pop(0)
            job["workdir"].mkdir(parents=True, exist_ok=True)
            job["log_file"] = open(job["workdir"] / "log.txt", "w")
            job["proc"] = subprocess.Popen(job["cmd"], cwd=REPO, env=job_env(args, job["model"]),
                                           stdout=job["log_file"], stderr=subprocess.STDOUT,
                                           start_new_session=True)
            job["start"] = time.perf_counter()
            running.append(job)
        time.sleep(1.0)
        now = time.perf_counter() - started
        for job in list(running):
            rc = job["proc"].poll()
            if rc is not None:
                job.update(returncode=rc, seconds=time.perf_counter() - job["start"],
                           status="done" if rc == 0 else f"failed (exit {rc})")
                job["log_file"].close()
                running.remove(job)
                print(f"[{now:6.0f} s] {job['task']:18s} {job['model']:7s} {job['status']} "
                      f"after {job['seconds']:.0f} s", flush=True)
        if args.deadline_s and now >= args.deadline_s:
            for job in running:  # the whole session (the child and anything it started)
                os.killpg(job["proc"].pid, signal.SIGKILL)
                job["proc"].wait()
                job.update(returncode=None, seconds=time.perf_counter() - job["start"],
                           status=f"killed at the {args.deadline_s:.0f} s deadline")
                job["log_file"].close()
                print(f"[{now:6.0f} s] {job['task']:18s} {job['model']:7s} {job['status']}", flush=True)
            for job in pending:
                job.update(returncode=None, seconds=0.0, status="not started (deadline)")
            break
        if now - last_report >= args.report_every and running:
            last_report = now
            print(f"[{now:6.0f} s] running: " + ", ".join(
                f"{j['task']}/{j['model']} ({_last_line(j['workdir'] / 'log.txt')[:60]})" for j in running),
                flush=True)


def _last_line(path: Path) -> str:
    try:
        lines = [line for line in path.read_text(errors="replace").splitlines() if line.strip()]
    except OSError:
        return ""
    return lines[-1].strip() if lines else ""


def read_result(job: dict) -> dict | None:
    path = job["workdir"] / "results.json"
    return json.loads(path.read_text()) if path.exists() else None


def format_table(results: dict, args) -> str:
    """Task × model test Δ (nats/symbol), then the paper's finding and whether this run shows it."""
    def cell(task, model):
        r = results.get((task, model))
        if r is None:
            return "—"
        budget = " ⏱" if any(t.get("stopped_by_budget") for t in r["trials"]) else ""
        return (f"{r['test']['cross_entropy_difference']:.4f} ({_length_range_delta(r, within=True):.3f} / "
                f"{_length_range_delta(r, within=False):.3f}; {r['epochs_run']} ep{budget})")

    lines = [f"Test cross-entropy difference (nats/symbol, lower is better; 0 is optimal), lengths 40–100 "
             f"(lengths ≤ {MAX_TRAIN_LENGTH}, as in training / > {MAX_TRAIN_LENGTH}, from the per-length bins, whose "
             f"true probability is conditioned on the length as in Fig. 2's right half, so they sit about "
             f"log(61 lengths) / length above the whole-range figure; epochs run; ⏱ = stopped by the time "
             f"budget). Scale: {describe_scale(args)}.", "",
             "| task | " + " | ".join(MODEL_LABELS[m] for m in MODELS) + " | the paper (§6, Fig. 2) | this trial |",
             "|---|" + "---|" * (len(MODELS) + 2)]
    for task in TASKS:
        findings = PAPER_FINDINGS[task]
        seen = [f"{label}: " + (("yes" if check(results, task) else "no")
                                if all((task, m) in results for m in models) else "(missing runs)")
                for label, models, check in findings]
        lines.append(f"| {TASK_LABELS[task]} | " + " | ".join(cell(task, m) for m in MODELS)
                     + f" | {'; '.join(label for label, _, _ in findings)} | {'; '.join(seen)} |")
    return "\n".join(lines)


def range_delta(bins: dict, *, within: bool) -> float:
    """Test Δ over the lengths <= MAX_TRAIN_LENGTH (`within`) or above it, symbol-weighted over the per-length
    `bins` of a results.json's test split (NaN when the range has no bin)."""
    chosen = [b for b in bins.values() if (b["max_length"] <= MAX_TRAIN_LENGTH) == within]
    symbols = sum(b["num_symbols"] for b in chosen)
    return sum(b["cross_entropy_difference"] * b["num_symbols"] for b in chosen) / symbols if symbols else math.nan


def _length_range_delta(result: dict, *, within: bool) -> float:
    return range_delta(result["test"]["bins"], within=within)


def describe_scale(args) -> str:
    return (f"1 trial per cell (seed {args.seed}, lr {args.lr}), {args.train_size} training / {args.valid_size} "
            f"validation strings (lengths 40–80), batch 10, at most {args.epochs} epochs and "
            f"{args.budget_s:.0f} s of training per trial, {args.test_per_length} test strings per length")


def plot_by_length(results: dict, path: Path) -> bool:
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        print("matplotlib is not installed: no plot", flush=True)
        return False
    fig, axes = plt.subplots(1, len(TASKS), figsize=(4 * len(TASKS), 3.4), sharey=False)
    for ax, task in zip(axes, TASKS):
        for model in MODELS:
            r = results.get((task, model))
            if r is None:
                continue
            bins = sorted((int(k), v["cross_entropy_difference"]) for k, v in r["test"]["bins"].items())
            ax.plot([k for k, _ in bins], [v for _, v in bins], label=MODEL_LABELS[model])
        ax.axvline(MAX_TRAIN_LENGTH, linestyle="--", color="gray", linewidth=0.8)
        ax.set_title(TASK_LABELS[task])
        ax.set_xlabel("length")
        ax.set_ylim(bottom=0)
        ax.set_xlim(40, 100)
    axes[0].set_ylabel("test cross-entropy diff. (nats)")
    for ax in axes:  # the legend on the first panel that has lines
        if ax.get_lines()[1:]:
            ax.legend()
            break
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return True


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--out", required=True, type=Path, help="where the 4 result files go")
    ap.add_argument("--workdir-root", type=Path, default=None, help="job workdirs (default: a temporary directory)")
    ap.add_argument("--tasks", default=",".join(TASKS))
    ap.add_argument("--models", default=",".join(MODELS))
    ap.add_argument("--platform", choices=("gpu", "cpu"), default="gpu")
    ap.add_argument("--parallel", type=int, default=15, help="jobs at once")
    ap.add_argument("--cpu-models", default="tf,tf_sup",
                    help="models that run on the CPU cores even with --platform gpu (small, latency-bound: the GPU "
                         "is kept for the dVPDA); '' for none")
    ap.add_argument("--mem-fraction", type=float, default=0.12, help="GPU memory per GPU process")
    ap.add_argument("--no-autotune", action="store_true",
                    help="XLA_FLAGS=--xla_gpu_autotune_level=0 (faster compiles; off by default)")
    ap.add_argument("--budget-s", type=float, default=120.0,
                    help="training seconds per trial (training.max_train_seconds)")
    ap.add_argument("--deadline-s", type=float, default=270.0, help="kill what still runs after this (0: never)")
    ap.add_argument("--epochs", type=int, default=200)
    ap.add_argument("--train-size", type=int, default=2000)
    ap.add_argument("--valid-size", type=int, default=500)
    ap.add_argument("--test-per-length", type=int, default=10)
    ap.add_argument("--test-lengths", default="", help="comma-separated (default: every length 40–100)")
    ap.add_argument("--lr", type=float, default=0.005)
    ap.add_argument("--seed", type=int, default=1)
    # 81: every training and validation string (length <= 80, + BOS) in one padded width, the test strings in
    # two: three compiled programs per job; padding changes no number (causal models).
    ap.add_argument("--length-bucket", type=int, default=81)
    ap.add_argument("--nd-blocks", type=int, default=2,
                    help="architecture.nd_num_blocks for Tf+Nd (0: the kernel's default)")
    ap.add_argument("--log-every", type=int, default=50)
    ap.add_argument("--report-every", type=float, default=30.0)
    ap.add_argument("--set", action="append", default=[], metavar="KEY=VALUE", help="any other config override")
    ap.add_argument("--tiny", action="store_true", help="a smoke test: 40 strings, 1 epoch, 2 test lengths")
    args = ap.parse_args()
    if args.tiny:
        args.train_size, args.valid_size, args.test_per_length, args.epochs = 40, 20, 2, 1
        args.test_lengths = args.test_lengths or "40,100"
        args.length_bucket = max(args.length_bucket, 101)
    args.cpu_models = [m for m in args.cpu_models.split(",") if m]
    tasks = [t for t in args.tasks.split(",") if t]
    models = [m for m in args.models.split(",") if m]
    unknown = [t for t in tasks if t not in TASKS] + [m for m in models if m not in MODELS]
    if unknown:
        ap.error(f"unknown task or model {unknown}; tasks {TASKS}, models {MODELS}")
    args.out.mkdir(parents=True, exist_ok=True)
    root = args.workdir_root or Path(tempfile.mkdtemp(prefix="cfl_grid_"))
    jobs = [{"task": t, "model": m, "workdir": root / f"{t}_{m}"} for t in tasks for m in models]
    for job in jobs:
        if job["workdir"].exists() and args.workdir_root is None:
            shutil.rmtree(job["workdir"])
        job["cmd"] = job_command(job["task"], job["model"], job["workdir"], args)
    where = args.platform + (f" ({', '.join(args.cpu_models)} on the CPU)" if args.platform == "gpu"
                             and args.cpu_models else "")
    print(f"{len(jobs)} jobs, {args.parallel} at a time on {where}; workdirs in {root}; "
          f"scale: {describe_scale(args)}; deadline {args.deadline_s:.0f} s", flush=True)
    print("one job's command: " + " ".join(jobs[0]["cmd"]), flush=True)
    started = time.perf_counter()
    run_jobs(jobs, args)
    wall = time.perf_counter() - started

    results = {}
    for job in jobs:
        job["result"] = read_result(job)
        if job["result"] is not None:
            results[(job["task"], job["model"])] = job["result"]
    table = format_table(results, args)
    print(f"\n{len(results)} of {len(jobs)} jobs finished in {wall:.0f} s wall\n\n{table}", flush=True)
    (args.out / "cfl_grid_table.md").write_text(table + "\n")
    summary = {
        "scale": describe_scale(args), "wall_seconds": wall, "platform": args.platform,
        "args": {k: (str(v) if isinstance(v, Path) else v) for k, v in vars(args).items()},
        "jobs": [{"task": j["task"], "model": j["model"], "command": j["cmd"], "status": j.get("status"),
                  "seconds": j.get("seconds"), "result": j["result"]} for j in jobs],
    }
    (args.out / "cfl_grid.json").write_text(json.dumps(summary, indent=1, allow_nan=True))
    plotted = plot_by_length(results, args.out / "cfl_grid_by_length.png")
    with open(args.out / "cfl_grid_logs.txt", "w") as f:
        for job in jobs:
            log = job["workdir"] / "log.txt"
            tail = log.read_text(errors="replace").splitlines()[-25:] if log.exists() else []
            f.write(f"==== {job['task']} {job['model']}: {job.get('status')} ({job.get('seconds') or 0:.0f} s)\n")
            f.write("\n".join(tail) + "\n")
    print(f"wrote {args.out / 'cfl_grid.json'}, cfl_grid_table.md, "
          + ("cfl_grid_by_length.png, " if plotted else "") + "cfl_grid_logs.txt", flush=True)
    return 0 if len(results) == len(jobs) else 1


if __name__ == "__main__":
    sys.exit(main())
