"""Token types of action sequences, with the authors' released conventions.

The integer values are those of the Transformer Grammars release, so that
preprocessed data carries over: PAD 0, BOS 1, opening non-terminal 2,
terminal 3, closing non-terminal 4 (after duplication: the first copy, CNT1,
which performs COMPOSE), placeholder/unknown 5 (behaves as a terminal), and
the second copy of a closing non-terminal, CNT2 (STACK), 14.
"""

from __future__ import annotations

import numpy as np

PAD = 0
BOS = 1
OPENING_NT = 2
TERMINAL = 3
CLOSING_NT = 4  # before duplication; after it, the COMPOSE copy (CNT1)
PLACEHOLDER = 5
CLOSING_NT_2 = 14  # second copy of a closing non-terminal (CNT2, STACK)

CNT1 = CLOSING_NT
CNT2 = CLOSING_NT_2

VALID_TYPES = (PAD, BOS, OPENING_NT, TERMINAL, CLOSING_NT, PLACEHOLDER, CLOSING_NT_2)
NAMES = {
    PAD: "PAD",
    BOS: "BOS",
    OPENING_NT: "ONT",
    TERMINAL: "T",
    CLOSING_NT: "CNT1",
    PLACEHOLDER: "UNK",
    CLOSING_NT_2: "CNT2",
}


def check_types(ttypes: np.ndarray, *, allow_cnt2: bool, where: str = "input") -> None:
    """Raises ValueError naming the first position whose token type is unknown."""
    allowed = set(VALID_TYPES) if allow_cnt2 else set(VALID_TYPES) - {CLOSING_NT_2}
    bad = ~np.isin(ttypes, list(allowed))
    if bad.any():
        pos = int(np.argmax(bad))
        raise ValueError(
            f"{where}: unknown token type {int(ttypes[pos])} at position {pos}; "
            f"expected one of {sorted(allowed)} ({', '.join(NAMES[t] for t in sorted(allowed))})"
        )


def duplicate_closing_nts(
    inputs: np.ndarray,
    inputs_ttypes: np.ndarray,
    labels: np.ndarray,
    labels_ttypes: np.ndarray,
) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """The TG transform: every closing non-terminal becomes CNT1 (COMPOSE) then CNT2 (STACK).

    The CNT1 copy predicts nothing (label 0, label type PAD); the CNT2 copy
    carries the original label. Vectorised: one `np.repeat`.

    Args:
      inputs, inputs_ttypes, labels, labels_ttypes: `[n]` integer arrays.
    Returns:
      The four arrays transformed, each `[n + number of closing NTs]`.
    """
    inputs_ttypes = np.asarray(inputs_ttypes)
    is_closing = inputs_ttypes == CLOSING_NT
    repeats = 1 + is_closing.astype(np.int64)
    out_inputs = np.repeat(np.asarray(inputs), repeats)
    out_ttypes = np.repeat(inputs_ttypes, repeats)
    out_labels = np.repeat(np.asarray(labels), repeats)
    out_labels_ttypes = np.repeat(np.asarray(labels_ttypes), repeats)
    # Index of each original position's first copy in the output.
    first = np.cumsum(repeats) - repeats
    closing_first = first[is_closing]
    out_ttypes[closing_first + 1] = CLOSING_NT_2
    out_labels[closing_first] = 0
    out_labels_ttypes[closing_first] = PAD
    return out_inputs, out_ttypes, out_labels, out_labels_ttypes
