"""The classification corpus' per-process memory: the logic files and the generated ListOps sets are made once
while what they come from is unchanged, and again as soon as it changes."""

from __future__ import annotations

import os

import pytest

from tgjax.data import classification_corpus as corpus
from tgjax.data import listops
from tgjax.data.logic import LogicFormatError

PAIRS = {"train0": "=\ta\ta\n", "train1": "^\ta\t( not a )\n<\t( a ( and b ) )\ta\n",
         "test1": "|\t( not a )\ta\n"}


@pytest.fixture
def logic_dir(tmp_path):
    for name, text in PAIRS.items():
        (tmp_path / name).write_text(text)
    corpus._read_logic_files.cache_clear()
    yield tmp_path
    corpus._read_logic_files.cache_clear()


def test_logic_files_are_read_once_while_unchanged(logic_dir):
    first = corpus.logic_files(logic_dir)
    assert [e.relation for e in first.bucket("train", 1)] == ["^", "<"]
    assert corpus.logic_files(logic_dir) is first
    assert corpus.logic_files(str(logic_dir) + "/") is first  # the same folder, spelt otherwise
    assert isinstance(first.bucket("train", 1), tuple)  # shared by every caller: read-only


def test_a_changed_file_is_read_again(logic_dir):
    first = corpus.logic_files(logic_dir)
    (logic_dir / "train1").write_text("#\t( not a )\tb\n")  # another size
    second = corpus.logic_files(logic_dir)
    assert second is not first and [e.relation for e in second.bucket("train", 1)] == ["#"]
    # The same size, another modification time: read again.
    stat = (logic_dir / "train0").stat()
    (logic_dir / "train0").write_text("^\ta\ta\n")
    os.utime(logic_dir / "train0", ns=(stat.st_atime_ns, stat.st_mtime_ns + 10**9))
    third = corpus.logic_files(logic_dir)
    assert third is not second and third.bucket("train", 0)[0].relation == "^"
    # A new file: read again, and it is there.
    (logic_dir / "test2").write_text("v\t( not ( a ( and b ) ) )\t( b ( or a ) )\n")
    assert 2 in corpus.logic_files(logic_dir).test


def test_a_malformed_file_raises_on_every_read(logic_dir):
    (logic_dir / "train1").write_text("=\ta\n")
    for _ in range(2):  # an error is not remembered as a result
        with pytest.raises(LogicFormatError, match="train1:1:"):
            corpus.logic_files(logic_dir)


def test_a_missing_folder_says_so(tmp_path):
    with pytest.raises(FileNotFoundError, match="no logic data directory"):
        corpus.logic_files(tmp_path / "absent")


def test_generated_listops_is_made_once_per_arguments(monkeypatch):
    corpus.generated_listops.cache_clear()
    calls = []
    real = listops.generate

    def counting(*args, **kwargs):
        calls.append(kwargs["seed"])
        return real(*args, **kwargs)

    monkeypatch.setattr(listops, "generate", counting)
    train, valid = corpus.generated_listops(40, 10, 3, 20)
    assert corpus.generated_listops(40, 10, 3, 20) == (train, valid) and calls == [3, 4]
    assert len(train) == 40 and len(valid) == 10
    assert not {e.expression for e in train} & {e.expression for e in valid}
    assert [e.expression for e in train] == [e.expression for e in real(40, seed=3, max_tokens=20)]
    corpus.generated_listops(40, 10, 5, 20)  # another seed: drawn again
    assert calls == [3, 4, 5, 6]
    corpus.generated_listops.cache_clear()
