"""Behaviour cloning of Craft policies (OCN, MoE, LSTM, OMPN) from bot demonstrations (`trainer="craft_bc"`).

    tgjax train --config configs/ocn_craft.py --workdir runs/ocn_craft            # OCN, the thesis' recipe
    tgjax train --config configs/ocn_craft.py:moe --workdir runs/moe_craft        # the MoE baseline
    tgjax train --config configs/ocn_craft.py:lstm --workdir runs/lstm_craft      # the LSTM baseline
    tgjax train --config configs/ocn_craft.py:ompn --workdir runs/ompn_craft      # the OMPN baseline

What it hands the trainer (`tgjax.train.task`):

* data: one demonstration file per task of `data.tasks` (comma-separated
  subtask letters; the task id of a file is its position there), read from
  `data.demo_dir/TASK.npz` with the checked reader
  (`tgjax.data.craft_demos`: a file of another environment version, task or
  time limit is refused, naming it). `data.generate=True` makes the missing
  files with the bot first (`data.num_demos` each, seeded; the same thing
  `tgjax data craft-demos` writes). The first `data.num_demos` episodes of a
  file are used: the last `valid_fraction` of them validate (the thesis'
  80/20 split).
* batches: whole episodes, padded to max_steps + 1 rows. The bot's final
  DONE row is read but is no target: the thesis' actions are up, down,
  left, right and use, the environment signalling the task's end, and a
  DONE imitated at the end of the short training tasks is what an option
  then says midway through a longer one. `data.train_final_done=True`
  trains on it, as OMPN's release's behaviour cloning does. The observation
  reduced to its live features (`tgjax.models.ocn.live_observation_indices`)
  and stored as uint8; an epoch's order is a function of (seed, epoch)
  (`tgjax.data.batching.epoch_order`), each epoch a grain dataset of its
  batches (`EpochBatches`), so the position {"epoch", "step"} is all a
  checkpoint needs; the last partial batch of an epoch is dropped (a
  shuffled epoch loses < 1 batch).
* the step: the mean over real steps of -log pi_t(a_t) (the mixture of
  `tgjax.nn.ocn`, gradient through every mixture probability), Adam
  (thesis: batch 512, lr 1e-3), optional clipping. A diagnostic, not the
  thesis': `training.subtask_hint_weight` > 0 (OCN, MoE) adds that times the
  NLL, under the option mixture p_t, of a fixed option per subtask kind
  (`subtask_hint_options`), to start the options specialised; resumed with
  0, the run goes on under the likelihood alone.
* validation: NLL per step and action accuracy on the held-out episodes;
  for OCN also the segmentation metrics of `tgjax.data.craft_metrics`
  (F1 tol 0 / 1, task alignment, NMI of argmax p_t against the subtask's
  kind), for MoE the NMI, for OMPN F1 and task alignment (its boundary
  score is the expected expansion position, `tgjax.nn.ompn`; its pointer
  is no option, so no NMI). Selection: validation NLL (lower is better).
"""

from __future__ import annotations

import dataclasses
import functools
import hashlib
from pathlib import Path
from typing import Any

import grain
import jax
import jax.numpy as jnp
import ml_collections
import numpy as np
import optax
from flax import nnx

from tgjax.data.batching import EpochBatches, epoch_order, local_rows
from tgjax.data.craft_demos import CraftDemoError, CraftDemos, read_craft_demos
from tgjax.data.craft_episodes import (
    Episodes,
    make_episodes,
    score_episodes,
    split_indices,
)
from tgjax.envs import craft_rules as rules
from tgjax.models.ocn import (
    CraftPolicyConfig,
    build_policy,
    demonstration_scores,
    live_observation_indices,
    teacher_forced,
)
from tgjax.models.parts import count_parameters
from tgjax.train import sharding as shd
from tgjax.train.config import ConfigError, check_positive_int, check_range, family_config, to_json_dict
from tgjax.train.metrics import SummingWindow
from tgjax.train.model_info import ModelInfo
from tgjax.train.params_state import ParamsStateTask, params_layout
from tgjax.train.schedules import StepSchedule
from tgjax.train.step import make_train_step
from tgjax.train.task import Evaluation, RunContext, Selection, read_intervals


def default_config() -> ml_collections.ConfigDict:
    """Every key this task and the trainer read, at the thesis' values (§5.3; configs/ocn_craft.py)."""
    return family_config(dict(
        trainer="craft_bc",
        data=dict(
            tasks="AC,CD,DA",      # comma-separated tasks (subtask letters A=wood B=gold C=iron D=grass)
            demo_dir="",           # "" = WORKDIR/demos
            generate=True,         # make missing files with the bot
            num_demos=6000,        # episodes used per task (and generated, when generating)
            valid_fraction=0.2,
            seed=0,                # the bot's seed (task i uses seed + i)
            max_steps=64,          # the episode time limit the demonstrations were made with
            # False (the thesis' actions): the bot's final DONE is read, not imitated (the environment ends tasks);
            # True: it is a target, as in OMPN's release
            train_final_done=False,
        ),
        model=dict(kind="ocn", num_options=3, hidden_size=128, depth=2, controller_temperature=10.0,
                   option_temperature=1.0, live_inputs=True, num_slots=3,  # num_slots: OMPN's memory
                   task_state_init_std=0.1,   # OCN's per-task controller state h^c_0 ~ N(0, std^2) at the start
                   option_done_bias_init=0.0,  # OCN: the options' done-head bias at the start (e = σ(b_e))
                   ompn_pointer="stickbreaking",  # OMPN: the release's bots' pointer; "softmax" the alternative
                   task_input=True),  # False: the policy is not told the task (every task starts from one state)
        training=dict(num_steps=2000, batch_size=512, learning_rate=1e-3, clip_grad_norm=0.0, seed=1,
                      # > 0 (ocn, moe; a diagnostic, not the thesis'): add this times the NLL of a fixed option per
                      # subtask kind under the option mixture p_t, to start the options specialised
                      subtask_hint_weight=0.0),
        evaluation=dict(interval_steps=200, batch_size=512, max_episodes=0),  # 0 = every validation episode
    ), checkpointing=dict(interval_steps=200), logging=dict(interval_steps=20))


def task_names(config) -> tuple[str, ...]:
    """The tasks of `data.tasks`, each checked (`ConfigError` naming an unknown or unreachable one)."""
    names = tuple(t.strip() for t in str(config.data.tasks).split(",") if t.strip())
    if not names:
        raise ConfigError("config key 'data.tasks': expected comma-separated tasks such as 'AC,CD,DA'")
    if len(set(names)) != len(names):
        raise ConfigError(f"config key 'data.tasks': a task is listed twice in {config.data.tasks!r}")
    for name in names:
        try:
            rules.parse_task(name)
        except rules.CraftTaskError as error:
            raise ConfigError(f"config key 'data.tasks': {error}") from None
    return names


def subtask_hint_options(tasks: tuple[str, ...], num_options: int) -> dict[int, int]:
    """kind id -> the option `training.subtask_hint_weight` hints for its subtasks: the kind's rank among the
    tasks' subtask kinds (sorted ids), modulo the number of options."""
    kinds = sorted({kind for task in tasks for kind in rules.parse_task(task)})
    return {kind: rank % num_options for rank, kind in enumerate(kinds)}


def policy_config(config, num_tasks: int) -> CraftPolicyConfig:
    m = config.model
    return CraftPolicyConfig(kind=m.kind, num_tasks=num_tasks, num_options=m.num_options,
                             hidden_size=m.hidden_size, depth=m.depth,
                             controller_temperature=m.controller_temperature,
                             option_temperature=m.option_temperature, live_inputs=m.live_inputs,
                             num_slots=m.get("num_slots", 3),  # configs written before OMPN lack it
                             task_state_init_std=m.get("task_state_init_std", 0.1),
                             option_done_bias_init=m.get("option_done_bias_init", 0.0),
                             ompn_pointer=m.get("ompn_pointer", "softmax"),  # configs before the key: softmax
                             task_input=m.get("task_input", True))


def check_config(config) -> None:
    """The values this task reads, checked before anything starts (every key is there: the config was merged
    over `default_config()`); `ConfigError` names the key."""
    task_names(config)
    for key in ("data.num_demos", "data.max_steps", "training.num_steps", "training.batch_size",
                "evaluation.interval_steps", "evaluation.batch_size", "checkpointing.interval_steps",
                "logging.interval_steps"):
        check_positive_int(config, key)
    if not isinstance(config.data.train_final_done, bool):
        raise ConfigError(f"config key 'data.train_final_done' must be True or False, got "
                          f"{config.data.train_final_done!r}")
    check_range(config, "data.valid_fraction", 0, 1, low_open=True, high_open=True)
    check_range(config, "training.learning_rate", low=0, low_open=True)
    check_range(config, "training.subtask_hint_weight", low=0)
    if config.training.subtask_hint_weight > 0 and config.model.kind not in ("ocn", "moe"):
        raise ConfigError(f"config key 'training.subtask_hint_weight': hints an option per subtask, so it needs "
                          f"model.kind 'ocn' or 'moe', not {config.model.kind!r}")
    try:
        policy_config(config, 1)
    except ValueError as error:
        raise ConfigError(f"model settings: {error}") from None


def describe(config) -> ModelInfo:
    """What `tgjax info` prints: the policy and its parameter count (no data read)."""
    check_config(config)
    cfg = policy_config(config, len(task_names(config)))
    return ModelInfo(f"craft_{cfg.kind}", cfg.num_actions, "tgjax.envs.craft_rules.ACTIONS", dataclasses.asdict(cfg),
                     lambda rngs: build_policy(cfg, rngs))


# -----------------------------------------------------------------------------
# Data.


def demo_path(config, workdir: Path, task: str) -> Path:
    """Where task `task`'s demonstrations are: `data.demo_dir`, else the run's workdir (a local directory or a
    bucket: `tgjax.workdir.workdir_path`)."""
    directory = Path(config.data.demo_dir) if config.data.demo_dir else workdir / "demos"
    return directory / f"{task}.npz"


def load_task_demos(config, workdir: Path, say=print) -> dict[str, CraftDemos]:
    """task -> its checked demonstrations (generated first when missing and `data.generate`)."""
    out = {}
    for index, task in enumerate(task_names(config)):
        path = demo_path(config, workdir, task)
        if not path.is_file():
            if not config.data.generate:
                raise CraftDemoError(f"{path}: no demonstration file for task {task!r} (make it with `tgjax data "
                                     f"craft-demos --task {task} -o {path}`, or set data.generate=True)")
            from tgjax.data.craft_demos import write_craft_demos
            from tgjax.envs.craft_bot import generate_demos

            say(f"generating {config.data.num_demos} demonstrations of task {task} -> {path}")
            path.parent.mkdir(parents=True, exist_ok=True)
            demos, _ = generate_demos(task, config.data.num_demos, seed=config.data.seed + index,
                                      max_steps=config.data.max_steps)
            write_craft_demos(path, demos)
        demos = read_craft_demos(path)
        if demos.task != task:
            raise CraftDemoError(f"{path}: holds demonstrations of task {demos.task!r}, expected {task!r}")
        if demos.max_steps != config.data.max_steps:
            raise CraftDemoError(f"{path}: made with a time limit of {demos.max_steps} steps, but "
                                 f"data.max_steps={config.data.max_steps}")
        if demos.full_view:
            raise CraftDemoError(f"{path}: made with full_view=True; these policies read the default view")
        out[task] = demos
    return out


def episode_batches(episodes: Episodes, batch_size: int, seed: int, position: dict | None = None,
                    process_index: int = 0, process_count: int = 1) -> EpochBatches:
    """The training batches (this process's rows of `Episodes.rows`), resumable from a position {"epoch", "step"}.

    Epoch e is a grain dataset over its batches' episodes: the episodes in the order `epoch_order(N, seed, e)`
    cut into `batch_size` rows, the last partial batch dropped.
    """
    if len(episodes) < batch_size:
        raise ValueError(f"training.batch_size={batch_size} is larger than the {len(episodes)} training episodes")
    per_epoch = len(episodes) // batch_size

    def epoch_dataset(epoch: int) -> grain.MapDataset:
        order = epoch_order(len(episodes), seed, epoch)
        plan = [order[step * batch_size:(step + 1) * batch_size] for step in range(per_epoch)]
        return grain.MapDataset.source(plan).map(
            lambda rows: local_rows(episodes.rows(rows), process_index, process_count))

    return EpochBatches(epoch_dataset, position)


# -----------------------------------------------------------------------------
# Steps.


def cloning_loss(model, batch, key=None, *, hint_weight: float = 0.0):
    """The behaviour-cloning loss of a batch of demonstrations (the trainer's step differentiates it; no draws):
    (mean NLL over real steps, {"sum_nll", "num_correct" (argmax actions), "num_steps" (real steps)}).

    With `hint_weight` > 0 the batch holds "hint_option" [B, T] (`Episodes.with_subtask_hints`), and the loss
    adds hint_weight times the mean of -log p_t[hint] over the target rows that have a hint (the option
    mixture's NLL of the subtask's option); {"sum_hint_nll", "num_hinted"} join the metrics."""
    step_nll, hit, out = teacher_forced(model, batch["obs"], batch["actions"], batch["task_ids"])
    mask = batch["mask"]
    total = jnp.sum(mask * step_nll)
    count = jnp.sum(mask)
    correct = jnp.sum(mask * hit)
    loss, metrics = total / jnp.maximum(count, 1.0), {"sum_nll": total, "num_correct": correct, "num_steps": count}
    if hint_weight:
        hint = batch["hint_option"]
        hinted = mask * (hint >= 0)
        hint_nll = -jnp.take_along_axis(out.log_p, jnp.maximum(hint, 0)[..., None], axis=-1)[..., 0]
        hint_total, hint_count = jnp.sum(hinted * hint_nll), jnp.sum(hinted)
        loss = loss + hint_weight * hint_total / jnp.maximum(hint_count, 1.0)
        metrics.update(sum_hint_nll=hint_total, num_hinted=hint_count)
    return loss, metrics


def sequence_nll(graphdef, params, batch):
    """`cloning_loss` of the policy `graphdef` with `params`."""
    return cloning_loss(nnx.merge(graphdef, params), batch)


def make_steps(graphdef, tx: optax.GradientTransformation, hint_weight: float = 0.0):
    """train_step(state, rest, batch) -> (state, metrics): the trainer's one step on `cloning_loss` (with
    `hint_weight`); eval_step(params, batch) -> the demonstrations' scores."""
    train_step = make_train_step(graphdef, functools.partial(cloning_loss, hint_weight=hint_weight), tx)

    def eval_step(params, batch):
        return demonstration_scores(nnx.merge(graphdef, params), batch["obs"], batch["actions"], batch["mask"],
                                    batch["task_ids"])

    return train_step, eval_step


# -----------------------------------------------------------------------------
# The task.


class CraftBCTask(ParamsStateTask):
    """Behaviour cloning of a Craft policy; see the module docstring."""

    name = "craft_bc"
    selection = Selection("valid_nll", "min")
    default_config = staticmethod(default_config)
    schedule = StepSchedule()
    model_has_rest = False  # the policies keep no RNG streams

    def __init__(self, config):
        self.config = config
        read_intervals(self, config)
        self.batch_size = config.training.batch_size

    def validate_config(self, config) -> None:
        check_config(config)

    def check_mesh(self, mesh) -> None:
        shd.check_batch_divides(self.batch_size, mesh, "training.batch_size")
        shd.check_batch_divides(self.config.evaluation.batch_size, mesh, "evaluation.batch_size")

    def setup(self, run: RunContext) -> None:
        self.run = run
        self.tasks = task_names(self.config)
        self.policy_config = policy_config(self.config, len(self.tasks))
        d = self.config.data
        task_demos = load_task_demos(self.config, run.workdir, run.say)
        train_idx, valid_idx = {}, {}
        for task, demos in task_demos.items():
            train_idx[task], valid_idx[task] = split_indices(demos, d.num_demos, d.valid_fraction)
        self.available = {task: len(demos) for task, demos in task_demos.items()}
        live = (live_observation_indices() if self.policy_config.live_inputs else np.arange(rules.OBS_SIZE))
        length = d.max_steps + 1
        final_done = bool(d.get("train_final_done", True))  # configs written before the key lack it
        self.train_episodes = make_episodes(task_demos, train_idx, length, live, train_final_done=final_done)
        self.valid_episodes = make_episodes(task_demos, valid_idx, length, live, train_final_done=final_done)
        self.hint_weight = float(self.config.training.get("subtask_hint_weight", 0.0))
        if self.hint_weight:
            self.train_episodes = self.train_episodes.with_subtask_hints(
                subtask_hint_options(self.tasks, self.policy_config.num_options))
        digest = hashlib.sha256()
        for task, demos in task_demos.items():
            digest.update(task.encode())
            digest.update(demos.actions[:int(demos.offsets[train_idx[task].stop])].tobytes())
        self.data_fingerprint = digest.hexdigest()

        abstract = nnx.eval_shape(lambda: self._build(nnx.Rngs(0)))
        self.graphdef = nnx.split(abstract, nnx.Param, ...)[0]
        self.layout = params_layout(self._build, run.mesh, shd.config_rules(self.config))
        self.num_parameters = count_parameters(abstract)
        t = self.config.training
        parts = [optax.clip_by_global_norm(t.clip_grad_norm)] if t.clip_grad_norm > 0 else []
        self.tx = optax.chain(*parts, optax.adam(t.learning_rate))
        self.replicated = shd.replicated(run.mesh)
        train_step, eval_step = make_steps(self.graphdef, self.tx, self.hint_weight)
        self._train_step = jax.jit(train_step, donate_argnums=(0,),
                                   out_shardings=(self.layout.state_shardings(self.tx), self.replicated))
        self._eval_step = jax.jit(eval_step)

    def describe_run(self) -> list[str]:
        c = self.policy_config
        sizes = {"ocn": f"K={c.num_options} options, ", "moe": f"K={c.num_options} options, ",
                 "ompn": f"n={c.num_slots} slots, "}.get(c.kind, "")
        return [f"Craft behaviour cloning, policy {c.kind}: {self.num_parameters:,} parameters "
                f"({sizes}H={c.hidden_size}"
                f", {len(self.tasks)} tasks {', '.join(self.tasks)})",
                (f"data: {len(self.train_episodes):,} training and {len(self.valid_episodes):,} validation episodes "
                 f"(of {', '.join(f'{t} {n}' for t, n in self.available.items())} available)")]

    # -- state and checkpoints ---------------------------------------------------------------

    def _build(self, rngs: nnx.Rngs):
        return build_policy(self.policy_config, rngs)

    def checkpoint_meta(self) -> dict[str, Any]:
        return {"tasks": list(self.tasks), "model": dataclasses.asdict(self.policy_config),
                "batch_size": self.batch_size, "data_sha256": self.data_fingerprint,
                "config": to_json_dict(self.config)}

    def check_checkpoint(self, meta: dict, step: int, directory: Path) -> None:
        changed = []
        saved = meta.get("model")
        try:  # a checkpoint from before a config field existed (num_slots) holds that field's default
            same_model = isinstance(saved, dict) and CraftPolicyConfig.from_record(saved) == self.policy_config
        except (TypeError, ValueError):
            same_model = False
        if not same_model:
            changed.append(f"model: {meta.get('model')} in the checkpoint, "
                           f"{dataclasses.asdict(self.policy_config)} now")
        if meta.get("tasks") != list(self.tasks):
            changed.append(f"data.tasks: {meta.get('tasks')} in the checkpoint, {list(self.tasks)} now")
        if meta.get("batch_size") != self.batch_size:
            changed.append(f"training.batch_size: {meta.get('batch_size')} in the checkpoint, {self.batch_size} now")
        if meta.get("data_sha256") != self.data_fingerprint:
            changed.append("the training demonstrations differ (data.num_demos, data.valid_fraction or the files)")
        if changed:
            raise ConfigError(f"checkpoint step {step} in {directory} is of another run: " + "; ".join(changed)
                              + ". Use the original config or a new --workdir")

    def resume_from(self, meta: dict) -> None:
        pass

    # -- steps ---------------------------------------------------------------------------------

    def batches(self, position: dict | None) -> EpochBatches:
        return episode_batches(self.train_episodes, self.batch_size, self.config.training.seed, position,
                               self.run.process_index, self.run.process_count)

    def make_train_step(self):
        step = self._train_step
        rate = jnp.float32(self.config.training.learning_rate)

        def train_step(state, rest, batch):
            state, metrics = step(state, rest, batch)
            return state, {**metrics, "learning_rate": rate}

        return train_step

    def new_window(self) -> SummingWindow:
        # per environment step (the "tokens" of tokens/s); the step does not report its constant rate
        ratios = {"loss": ("sum_nll", "num_steps"), "action_accuracy": ("num_correct", "num_steps")}
        if self.hint_weight:
            ratios["hint_nll"] = ("sum_hint_nll", "num_hinted")
        return SummingWindow(ratios=ratios, tokens="num_steps", learning_rate=float(self.config.training.learning_rate))


    # -- evaluation ----------------------------------------------------------------------------

    def has_validation(self) -> bool:
        return len(self.valid_episodes) > 0

    def validation_outputs(self, params, episodes: Episodes, max_episodes: int = 0) -> dict[str, Any]:
        """`score_episodes` of `episodes` (`max_episodes` of them, as many from each task, when set) with `params`."""
        def run(rows):
            return jax.device_get(self._eval_step(params, shd.global_batch(rows, self.run.mesh)))

        return score_episodes(run, episodes, self.config.evaluation.batch_size, self.policy_config.kind,
                              max_episodes)

    def evaluate(self, state, rest) -> Evaluation:
        result = self.validation_outputs(state.params, self.valid_episodes, self.config.evaluation.max_episodes)
        message = f"NLL {result['nll']:.4f}, action accuracy {100 * result['action_accuracy']:.1f}%"
        if "f1_tol1" in result:
            message += f", F1 tol1 {result['f1_tol1']:.3f}, align {result['align_acc']:.3f}"
        if "nmi" in result:
            message += f", NMI {result['nmi']:.3f}"
        return Evaluation(values={"valid_nll": result["nll"]}, record=result, message=message)

    def result_fields(self) -> dict[str, Any]:
        return {"num_parameters": self.num_parameters, "vocab_size": self.policy_config.num_actions}

    def summary(self, result) -> str | None:
        return None
