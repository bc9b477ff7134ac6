"""The curated claims file, reproduction/claims.json: one entry per headline claim of each paper.

Each entry holds the paper's number and protocol, what README.md reports for our CPU-scale and accelerator
runs, the verdict under `tgjax.reproduce.verdict`'s rule, what is known about why, and whether
`tgjax reproduce` can run it ("runnable", "accelerator-only" or "not yet automated"). Loading checks every
entry: the fields are there, the verdict is one the rule allows for the seeds behind it, and the runnable
entries are exactly the claims with a recipe.
"""

from __future__ import annotations

import dataclasses
import importlib.util
import json
from pathlib import Path

from tgjax.reproduce.verdict import check_curated

REPO_ROOT = Path(__file__).resolve().parents[2]
# reproduction/ ships in the wheel as this package (setup.py), read-only: the claims and the project's records.
SHIPPED_PACKAGE = "tgjax_reproduction"


def in_checkout() -> bool:
    """Whether tgjax runs from a source checkout (editable install or the tree itself), whose reproduction/ and
    docs/ the ledger reads and writes; an installed wheel has neither next to it."""
    return (REPO_ROOT / "reproduction" / "claims.json").is_file() and (REPO_ROOT / "pyproject.toml").is_file()


def project_file(name: str) -> Path:
    """reproduction/NAME of the checkout, else the copy an installed tgjax ships (`SHIPPED_PACKAGE`)."""
    checkout = REPO_ROOT / "reproduction" / name
    if in_checkout():
        return checkout
    try:
        spec = importlib.util.find_spec(SHIPPED_PACKAGE)
    except (ImportError, ValueError):
        spec = None
    for location in (spec.submodule_search_locations or []) if spec is not None else []:
        if (Path(location) / name).is_file():
            return Path(location) / name
    return checkout  # neither: the reader says the file is missing


CLAIMS_FILE = project_file("claims.json")
RECIPE_KINDS = ("runnable", "accelerator-only", "not yet automated")


class ClaimsError(ValueError):
    """A claims file that does not hold what the ledger needs; the message names the entry and field."""


@dataclasses.dataclass(frozen=True)
class Claim:
    id: str
    paper: str  # the paper's key in the file's "papers"
    claim: str
    paper_result: dict  # number, protocol, where
    ours_cpu: dict | None  # number, seeds, spread, wall, command
    ours_accelerator: dict | None  # hardware, number, steps, date, commit, seeds
    verdict: str
    why: str
    recipe: str
    recipe_note: str = ""

    @property
    def evidence_seeds(self) -> int:
        return max((side or {}).get("seeds", 0) or 0 for side in (self.ours_cpu, self.ours_accelerator))


@dataclasses.dataclass(frozen=True)
class ClaimsFile:
    papers: dict[str, str]
    claims: list[Claim]

    def by_id(self) -> dict[str, Claim]:
        return {c.id: c for c in self.claims}


_REQUIRED = {"paper_result": ("number", "protocol", "where"), "ours_cpu": ("number", "seeds", "spread", "wall",
                                                                              "command"),
             "ours_accelerator": ("hardware", "number", "steps", "date", "commit", "seeds")}


def load_claims(path: str | Path = CLAIMS_FILE, *, runnable_ids: set[str] | None = None) -> ClaimsFile:
    """Reads and checks the claims file; `runnable_ids` (the recipes' claim ids) are matched against it."""
    path = Path(path)
    try:
        data = json.loads(path.read_text())
    except (OSError, json.JSONDecodeError) as error:
        raise ClaimsError(f"{path}: {error}") from None
    claims = []
    fields = {f.name for f in dataclasses.fields(Claim)}
    for index, entry in enumerate(data.get("claims", [])):
        where = f"{path}: claim {entry.get('id', index)}"
        missing = fields - set(entry) - {"recipe_note"}
        unknown = set(entry) - fields
        if missing or unknown:
            raise ClaimsError(f"{where}: missing {sorted(missing)}, unknown {sorted(unknown)}")
        for section, keys in _REQUIRED.items():
            if entry[section] is not None and (absent := [k for k in keys if k not in entry[section]]):
                raise ClaimsError(f"{where}: {section} lacks {absent}")
        if entry["paper"] not in data.get("papers", {}):
            raise ClaimsError(f"{where}: paper {entry['paper']!r} is not in the file's papers")
        if entry["recipe"] not in RECIPE_KINDS:
            raise ClaimsError(f"{where}: recipe {entry['recipe']!r} is not one of {', '.join(RECIPE_KINDS)}")
        claim = Claim(**entry)
        try:
            check_curated(claim.verdict, claim.evidence_seeds)
        except ValueError as error:
            raise ClaimsError(f"{where}: {error}") from None
        claims.append(claim)
    ids = [c.id for c in claims]
    if len(set(ids)) != len(ids):
        raise ClaimsError(f"{path}: claim ids repeat: {sorted({i for i in ids if ids.count(i) > 1})}")
    if runnable_ids is not None:
        marked = {c.id for c in claims if c.recipe == "runnable"}
        if marked != runnable_ids:
            raise ClaimsError(f"{path}: claims marked runnable {sorted(marked)} differ from the recipes "
                              f"{sorted(runnable_ids)}")
    return ClaimsFile(dict(data["papers"]), claims)
