"""Pictures: the STACK/COMPOSE attention mask of a tree, like Figure 2b of Sartran et al. (2022), a
tree, and training curves of runs (their metrics.jsonl)."""

from __future__ import annotations

import numpy as np

from tgjax.extras import require_extra
from tgjax.outputs import save_figure
from tgjax.syntax import actions, masks, trees
from tgjax.syntax import token_types as tt

STACK_COLOUR = (0.30, 0.45, 0.69)  # blue, as the paper's STACK
COMPOSE_COLOUR = (0.87, 0.52, 0.32)  # orange, as the paper's COMPOSE


def tg_mask(tree: trees.Tree, *, pos_tags: bool) -> tuple[list[str], np.ndarray, np.ndarray]:
    """The duplicated tokens `[n]`, their types `[n]` and the attention mask `[n, n]` of one tree.

    `pos_tags`: whether the tree's nodes over a single word are POS tags (dropped), as `actions.choe_charniak`.
    """
    tokens = ["<s>"] + actions.choe_charniak(tree, pos_tags=pos_tags)
    types = np.array([tt.BOS] + [actions.token_type(t) for t in tokens[1:]], np.int32)
    ids = np.arange(1, len(tokens) + 1, dtype=np.int32)
    dup_tokens = [t for t, ty in zip(tokens, types) for _ in range(2 if ty == tt.CLOSING_NT else 1)]
    n = len(dup_tokens)
    (chunk,) = masks.TGMasking(n, 1).chunks(ids, types, np.append(ids[1:], 0), np.append(types[1:], tt.PAD))
    return dup_tokens, chunk.inputs_ttypes, chunk.attn_mask


def draw_mask(tree: trees.Tree, path: str, *, pos_tags: bool) -> None:
    """Writes the mask as a PNG: rows attend to columns, STACK rows blue, COMPOSE rows orange."""
    matplotlib = require_extra("matplotlib", extra="plots", purpose="drawing")

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from matplotlib.patches import Patch

    tokens, types, mask = tg_mask(tree, pos_tags=pos_tags)
    n = len(tokens)
    image = np.ones((n, n, 3))
    compose_rows = types == tt.CNT1
    image[mask.astype(bool) & ~compose_rows[:, None]] = STACK_COLOUR
    image[mask.astype(bool) & compose_rows[:, None]] = COMPOSE_COLOUR
    size = max(4.0, 0.32 * n + 1.5)
    fig, ax = plt.subplots(figsize=(size, size))
    ax.imshow(image, interpolation="nearest")
    ax.set_xticks(range(n), tokens, rotation=90, fontsize=8)
    ax.set_yticks(range(n), [f"{i} {t}" for i, t in enumerate(tokens)], fontsize=8)
    ax.xaxis.tick_top()
    ax.set_xticks(np.arange(-0.5, n, 1), minor=True)
    ax.set_yticks(np.arange(-0.5, n, 1), minor=True)
    ax.grid(which="minor", color="0.85", linewidth=0.5)
    ax.tick_params(which="minor", length=0)
    ax.legend(handles=[Patch(color=STACK_COLOUR, label="STACK"), Patch(color=COMPOSE_COLOUR, label="COMPOSE")],
              loc="lower left", bbox_to_anchor=(0.0, -0.12), ncol=2, frameon=False)
    ax.set_title("TG attention mask (row attends to column)", pad=40 + 4 * max(len(t) for t in tokens))
    fig.tight_layout()
    save_figure(fig, path, dpi=150)  # the format of its extension; nothing left behind on failure
    plt.close(fig)


def loss_curves(workdir) -> dict:
    """A run's losses from its `metrics.jsonl`: {"train": (steps, losses), "valid": (steps, losses),
    "unigram": the unigram baseline (or None), "unreadable": line numbers that are not JSON}."""
    from tgjax.train.metrics import read_metrics

    records, unreadable = read_metrics(workdir)

    def series(split):
        rows = sorted((r["step"], r["loss"]) for r in records if r.get("split") == split and "loss" in r)
        return np.array([s for s, _ in rows], np.int64), np.array([v for _, v in rows], np.float64)

    unigram = next((r["unigram_loss"] for r in records if r.get("unigram_loss") is not None), None)
    return {"train": series("train"), "valid": series("valid"), "unigram": unigram, "unreadable": unreadable}


def draw_curves(workdirs, path: str, labels=None) -> list[dict]:
    """Writes training (thin) and validation (dots) loss against step for one or more runs as a PNG,
    with each run's unigram baseline dashed; returns the curves drawn (`loss_curves` of each run)."""
    matplotlib = require_extra("matplotlib", extra="plots", purpose="drawing")

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    labels = list(labels) if labels else [str(w) for w in workdirs]
    curves = [loss_curves(w) for w in workdirs]
    fig, ax = plt.subplots(figsize=(7.5, 4.5))
    for k, (label, c) in enumerate(zip(labels, curves)):
        colour = f"C{k}"
        ax.plot(*c["train"], color=colour, linewidth=0.8, alpha=0.7, label=f"{label} train")
        if len(c["valid"][0]):
            ax.plot(*c["valid"], "o-", color=colour, markersize=3.5, label=f"{label} validation")
        if c["unigram"] is not None:
            ax.axhline(c["unigram"], color=colour, linestyle="--", linewidth=0.8, alpha=0.6,
                       label=f"{label} unigram baseline")
    ax.set_xlabel("step")
    ax.set_ylabel("loss (nats per prediction event)")
    ax.grid(alpha=0.3)
    ax.legend(fontsize=8)
    ax.set_title("training curves")
    fig.tight_layout()
    save_figure(fig, path, dpi=150)  # the format of its extension; nothing left behind on failure
    plt.close(fig)
    return curves


def tree_layout(tree: trees.Tree) -> tuple[list[tuple[str, float, int, bool]], list[tuple[int, int]]]:
    """Where to draw each node: `(label, x, depth, is_word)` in pre-order, and `(parent, child)` edges.

    Words sit at x = 0, 1, 2, ... left to right, all on the bottom row (depth
    = the tree's height); a constituent sits midway between its first and
    last child, at its own depth (root 0). Iterative: deep trees are fine.
    """
    nodes: list[tuple[str, float, int, bool]] = []
    edges: list[tuple[int, int]] = []
    height = 0
    stack: list[tuple[trees.Child, int, int]] = [(tree, 0, -1)]  # (node, depth, parent index)
    order: list[tuple[int, trees.Tree]] = []
    while stack:
        node, depth, parent = stack.pop()
        index = len(nodes)
        if parent >= 0:
            edges.append((parent, index))
        if isinstance(node, str):
            nodes.append((node, 0.0, depth, True))
        else:
            nodes.append((node.label, 0.0, depth, False))
            order.append((index, node))
            stack.extend((child, depth + 1, index) for child in reversed(node.children))
        height = max(height, depth)
    children: dict[int, list[int]] = {}
    for parent, child in edges:
        children.setdefault(parent, []).append(child)
    x = 0
    for i, (label, _, _depth, is_word) in enumerate(nodes):  # pre-order visits words left to right
        if is_word:
            nodes[i] = (label, float(x), height, True)
            x += 1
    for index, _ in reversed(order):  # children before parents
        kids = children.get(index, [])
        label, _, depth, _ = nodes[index]
        middle = (nodes[kids[0]][1] + nodes[kids[-1]][1]) / 2 if kids else float(x)
        nodes[index] = (label, middle, depth, False)
    return nodes, edges


def draw_tree(tree: trees.Tree, path: str) -> None:
    """Writes a picture of the tree as a PNG: constituents above, words in a row at the bottom."""
    matplotlib = require_extra("matplotlib", extra="plots", purpose="drawing")

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    nodes, edges = tree_layout(tree)
    width = max(x for _, x, _, _ in nodes) + 1
    height = max(d for _, _, d, _ in nodes) + 1
    fig, ax = plt.subplots(figsize=(max(3.0, 0.9 * width + 1), max(2.0, 0.7 * height + 0.5)))
    for parent, child in edges:
        ax.plot([nodes[parent][1], nodes[child][1]], [-nodes[parent][2], -nodes[child][2]], color="0.6",
                linewidth=0.8, zorder=1)
    for label, x, depth, is_word in nodes:
        ax.text(x, -depth, label, ha="center", va="center", fontsize=9, zorder=2,
                style="italic" if is_word else "normal", fontweight="normal" if is_word else "bold",
                bbox=dict(boxstyle="round,pad=0.2", facecolor="white", edgecolor="none"))
    ax.set_xlim(-0.7, width - 0.3)
    ax.set_ylim(-height + 0.4, 0.6)
    ax.axis("off")
    fig.tight_layout()
    save_figure(fig, path, dpi=150)  # the format of its extension; nothing left behind on failure
    plt.close(fig)
