"""Phrase-structure trees: the PTB bracket reader and writer, normalisation, binarisation.

A `Tree` is a label and a list of children; a child is a `Tree` or a word
(`str`). A POS pre-terminal is a `Tree` whose only child is a word,
`Tree("DT", ["the"])`.
"""

from __future__ import annotations

import dataclasses
from typing import Union

Child = Union["Tree", str]


@dataclasses.dataclass
class Tree:
    label: str
    children: list[Child] = dataclasses.field(default_factory=list)

    def is_preterminal(self) -> bool:
        return len(self.children) == 1 and isinstance(self.children[0], str)

    def leaves(self) -> list[str]:
        """The words, left to right."""
        words: list[str] = []
        stack: list[Child] = [self]
        while stack:
            node = stack.pop()
            if isinstance(node, str):
                words.append(node)
            else:
                stack.extend(reversed(node.children))
        return words

    def to_string(self) -> str:
        """PTB bracketed form on one line, e.g. `(S (NP (DT the) (NN dog)) (VP (VBZ barks)))`."""
        parts = []
        for child in self.children:
            parts.append(child if isinstance(child, str) else child.to_string())
        return f"({self.label} {' '.join(parts)})" if parts else f"({self.label})"

    def __str__(self) -> str:
        return self.to_string()
