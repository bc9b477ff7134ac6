"""CoNLL-U writer and reader (tgjax.data.conllu) and `tgjax data deps` (tgjax.data.deps)."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings

from tests.strategies import random_trees
from tgjax.data import conllu
from tgjax.data.deps import main_deps, treebank_dependencies
from tgjax.syntax import heads as H
from tgjax.syntax.trees import parse

GOOD = """# sent_id = 1
# text = The dog barks .
1\tThe\t_\tDET\tDT\t_\t2\tdet\t_\t_
2\tdog\t_\tNOUN\tNN\t_\t3\tnsubj\t_\t_
3\tbarks\t_\tVERB\t_\t_\t0\troot\t_\t_
4\t.\t_\tPUNCT\t.\t_\t3\tpunct\t_\t_

1-2\tdon't\t_\t_\t_\t_\t_\t_\t_\t_
1\tdo\t_\tAUX\tVBP\t_\t0\troot\t_\t_
1.1\tgone\t_\t_\t_\t_\t_\t_\t_\t_
2\tn't\t_\tPART\tRB\t_\t1\tadvmod\t_\t_
"""


def test_reader_reads_heads_tags_and_counts_skipped_lines():
    sentences, report = conllu.parse_conllu(GOOD)
    assert [s.words for s in sentences] == [["The", "dog", "barks", "."], ["do", "n't"]]
    # 0-based, the root heads itself.
    assert sentences[0].heads.tolist() == [1, 2, 2, 2]
    assert sentences[1].heads.tolist() == [0, 0]
    # XPOS, or UPOS where XPOS is "_".
    assert sentences[0].tags == ["DT", "NN", "VERB", "."]
    assert report.num_sentences == 2 and report.multiword_lines == 1 and report.empty_nodes == 1


@settings(max_examples=60, deadline=None)
@given(random_trees(max_depth=4, max_children=3))
def test_round_trip(tree):
    deps = H.dependencies(tree)
    words = [w for w in deps.words if "\t" not in w]
    if len(words) != len(deps.words):
        return
    text = conllu.format_sentence(deps, 7)
    (back,), report = conllu.parse_conllu(text)
    assert back.words == deps.words and back.tags == deps.tags
    assert np.array_equal(back.heads, deps.heads)
    assert report.num_sentences == 1


def test_written_file_reads_back(tmp_path):
    trees = [parse("(S (NP (DT the) (NN dog)) (VP (VBZ barks)) (. .))"), parse("(NP (NN word))")]
    sentences = treebank_dependencies(trees)
    path = tmp_path / "out.conllu"
    assert conllu.write_conllu(path, sentences) == 2
    text = path.read_text()
    assert "# sent_id = 2\n# text = word\n1\tword\t_\t_\tNN\t_\t0\troot\t_\t_\n" in text
    back, _ = conllu.read_conllu(path)
    assert [b.heads.tolist() for b in back] == [s.heads.tolist() for s in sentences] == [[1, 2, 2, 2], [0]]


def _line(i, head):
    return f"{i}\tw{i}\t_\t_\tNN\t_\t{head}\tdep\t_\t_"


@pytest.mark.parametrize(
    "lines, where, message",
    [
        ([_line(1, 2), _line(2, 3), _line(3, 2)], "<string>:2:", "cycle through tokens 2 -> 3 -> 2"),
        ([_line(1, 0), _line(2, 3)], "<string>:2:", "head 3 out of range 0..2"),
        ([_line(1, 0), "2\tw2\t_\t_\tNN\t_\t1\tdep"], "<string>:2:1:", "expected 10 tab-separated fields, found 8"),
        ([_line(1, 0), _line(2, "x")], "<string>:2:", "expected a head"),
        ([_line(1, 0), _line(3, 1)], "<string>:2:1:", "expected token ID 2, found '3'"),
        ([_line(1, 0), _line(2, 0)], "<string>:2:", "a second root (head 0); the first is on line 1"),
        (["# c", _line(1, 1)], "<string>:2:", "cycle through tokens 1 -> 1"),
    ],
)
def test_bad_input_names_file_line_and_what_was_expected(lines, where, message):
    with pytest.raises(conllu.ConlluError) as info:
        conllu.parse_conllu("\n".join(lines) + "\n")
    assert str(info.value).startswith(where)
    assert message in str(info.value)


def test_head_column_is_located():
    with pytest.raises(conllu.ConlluError, match=r"^<string>:2:15: head 5 out of range"):
        conllu.parse_conllu(_line(1, 0) + "\n" + _line(2, 5) + "\n")


def test_skip_mode_drops_and_records_bad_sentences(tmp_path):
    text = "\n".join([_line(1, 2), _line(2, 1), "", _line(1, 0), ""]) + "\n"
    path = tmp_path / "bad.conllu"
    path.write_text(text)
    with pytest.raises(conllu.ConlluError, match="bad.conllu:1:"):
        conllu.read_conllu(path)
    sentences, report = conllu.read_conllu(path, on_error="skip")
    assert len(sentences) == 1 and report.num_sentences == 1
    assert len(report.errors) == 1 and "cycle" in str(report.errors[0])
    assert "skipped 1 bad ones" in report.summary()


def test_writer_refuses_unwritable_words():
    deps = H.Dependencies(["a\tb"], ["NN"], np.array([0]))
    with pytest.raises(ValueError, match="tabs"):
        conllu.format_sentence(deps)


# ------------------------------------------------------------- the command


def test_data_deps_command_on_a_file(tmp_path, capsys):
    treebank = tmp_path / "t.mrg"
    treebank.write_text(
        "(S (NP-SBJ (DT The) (NN dog)) (VP (VBD chased) (NP (DT the) (NN cat))) (. .))\n"
        "(S (FOO (NN a) (NN b)) (VP (VBZ c)) (. .))\n"
        "(S (. .))\n"
    )
    out = tmp_path / "out.conllu"
    assert main_deps(["--treebank", str(treebank), "-o", str(out), "--keep", "words"]) == 0
    printed = capsys.readouterr().out
    assert "wrote 2 sentences" in printed and "head scheme: collins" in printed
    assert "1 sentences left empty (skipped)" in printed and "FOO x1" in printed
    back, _ = conllu.read_conllu(out)
    assert [b.words for b in back] == [["The", "dog", "chased", "the", "cat"], ["a", "b", "c"]]
    assert back[0].heads.tolist() == [1, 2, 2, 4, 2]


def test_data_deps_command_passes_the_head_rule_switches(tmp_path, capsys):
    treebank = tmp_path / "fruit.mrg"
    treebank.write_text("(NP (NN apples) (, ,) (NNS pears) (, ,) (CC and) (NNS plums))\n")
    heads = {}
    for coordination in ("corenlp", "skip_punctuation"):
        out = tmp_path / f"{coordination}.conllu"
        assert main_deps(["--treebank", str(treebank), "-o", str(out), "--coordination", coordination]) == 0
        heads[coordination] = conllu.read_conllu(out)[0][0].root
    assert heads == {"corenlp": 5, "skip_punctuation": 2}  # "plums" as CoreNLP, "pears" past the commas
    assert "coordination past punctuation" in capsys.readouterr().out


def test_data_deps_command_on_the_shared_treebanks(shared_data, tmp_path, capsys):
    """Tale of Two Cities and one CRAFT file: every sentence written is a tree; NML is counted
    unless --nml-as-np. Skips when ../shared/data is absent."""
    out = tmp_path / "ttc.conllu"
    assert main_deps(["--treebank", str(shared_data / "tale_of_two_cities" / "test.txt"), "-o", str(out),
                      "--keep", "words"]) == 0
    back, report = conllu.read_conllu(out)  # the reader checks every sentence is a tree
    assert report.num_sentences == 293 and not report.errors
    assert "wrote 293 sentences" in capsys.readouterr().out
    craft = sorted((shared_data / "craft_treebank" / "penn").glob("*.tree"))[0]
    assert main_deps(["--treebank", str(craft), "-o", str(out)]) == 0
    assert "NML x" in capsys.readouterr().out
    assert main_deps(["--treebank", str(craft), "-o", str(out), "--nml-as-np"]) == 0
    printed = capsys.readouterr().out
    assert "NML x" not in printed and "collins with NML as NP" in printed
    conllu.read_conllu(out)


def test_data_deps_command_on_the_builtin_treebank(tmp_path, capsys):
    out = tmp_path / "b.conllu"
    assert main_deps(["--treebank", "builtin", "--split", "valid", "--num-sentences", "20", "-o", str(out)]) == 0
    assert "head scheme: builtin" in capsys.readouterr().out
    back, report = conllu.read_conllu(out)
    assert report.num_sentences == 20
    assert all(H.is_projective(s.heads) for s in back)


def test_data_deps_command_reports_a_bad_treebank(tmp_path, capsys):
    treebank = tmp_path / "bad.mrg"
    treebank.write_text("(S (NP (DT a)\n")
    assert main_deps(["--treebank", str(treebank), "-o", str(tmp_path / "o.conllu")]) == 2
    assert "bad.mrg:" in capsys.readouterr().err


def test_data_deps_runs_from_the_tgjax_command(tmp_path, capsys):
    from tgjax.cli import main

    treebank = tmp_path / "t.mrg"
    treebank.write_text("(S (NP (PRP it)) (VP (VBZ works)) (. .))\n")
    out = tmp_path / "o.conllu"
    assert main(["data", "deps", "--treebank", str(treebank), "-o", str(out)]) == 0
    (sentence,), _ = conllu.read_conllu(out)
    assert sentence.words == ["it", "works", "."] and sentence.heads.tolist() == [1, 1, 1]
