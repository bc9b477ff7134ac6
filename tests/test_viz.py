"""Pictures: the tree layout (by hand and as a property over random trees), and the command."""

from hypothesis import given, settings

from tests.strategies import random_trees
from tgjax import cli, viz
from tgjax.syntax import trees


def test_tree_layout_by_hand():
    nodes, edges = viz.tree_layout(trees.parse("(S (NP (DT the) (NN bird)) (VP sings))"))
    assert nodes == [("S", 1.25, 0, False), ("NP", 0.5, 1, False), ("DT", 0.0, 2, False), ("the", 0.0, 3, True),
                     ("NN", 1.0, 2, False), ("bird", 1.0, 3, True), ("VP", 2.0, 1, False), ("sings", 2.0, 3, True)]
    assert edges == [(0, 1), (1, 2), (2, 3), (1, 4), (4, 5), (0, 6), (6, 7)]


@settings(max_examples=60, deadline=None)
@given(random_trees(max_depth=6, max_children=4))
def test_tree_layout_properties(tree):
    nodes, edges = viz.tree_layout(tree)
    assert len(edges) == len(nodes) - 1
    words = [(label, x) for label, x, _, is_word in nodes if is_word]
    assert [label for label, _ in words] == tree.leaves()
    assert [x for _, x in words] == list(range(len(words)))  # left to right, one column each
    height = max(depth for _, _, depth, _ in nodes)
    assert all(depth == height for _, _, depth, is_word in nodes if is_word)  # words on the bottom row
    children = {}
    for parent, child in edges:
        children.setdefault(parent, []).append(child)
        assert not nodes[parent][3]  # words have no children
        if not nodes[child][3]:
            assert nodes[child][2] == nodes[parent][2] + 1
    for parent, kids in children.items():
        assert nodes[parent][1] == (nodes[kids[0]][1] + nodes[kids[-1]][1]) / 2
        assert [nodes[k][1] for k in kids] == sorted(nodes[k][1] for k in kids)  # no crossing edges


def test_viz_tree_command(tmp_path):
    out = tmp_path / "tree.png"
    assert cli.main(["viz", "tree", "(S (NP the bird) (VP sings))", "-o", str(out)]) == 0
    assert out.read_bytes()[:4] == b"\x89PNG"
    assert cli.main(["viz", "tree", "(S (NP the bird)", "-o", str(out)]) == 2  # malformed: a named error
