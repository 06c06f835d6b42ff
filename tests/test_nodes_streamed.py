"""Slurm's node list read as it arrives (slurm_plugin/answerstream.py ``NodesStream``): the same
nodes and the same errors as the whole-text reader (``parse_nodes_json``), whatever the pieces,
and the whole-text reader itself unchanged from when it parsed the whole tree."""

from __future__ import annotations

import json
import stat
import sys
import tracemalloc

import pytest

from slurm_plugin.answerstream import NodesStream
from slurm_plugin.commands import SlurmCommands
from slurm_plugin.parse import ParseError, node_from_json, parse_nodes_json
from slurm_plugin.source import CommandLineSource
from slurm_answers import NODES_RECORDED, ODD_NODE_ANSWERS, SINFO_AGGREGATED, nodes_like, streamed, surprised

WHAT = "Slurm 24.11.5: `scontrol show node --json=v0.0.42`"


def _whole(text: str, what: str = "scontrol show node --json"):
    try:
        return parse_nodes_json(text, what)
    except ParseError as exc:
        return type(exc), str(exc)


def _whole_tree(text: str, what: str = "scontrol show node --json"):
    """What parse_nodes_json did before it read a node at a time: json.loads, Slurm's
    errors, the list, then each record."""
    from slurm_plugin.parse import _load
    try:
        data = _load(text, what)
        nodes = data.get("nodes")
        if not isinstance(nodes, list):
            raise ParseError(f"{what} answered without the field 'nodes' as a per-node list "
                             f"(fields: {sorted(data)}); 23.02+ aggregates sinfo --json: nodes "
                             "come from scontrol show node --json there (slurm_plugin/contract.py)")
        return [node_from_json(n, what) for n in nodes]
    except ParseError as exc:
        return type(exc), str(exc)


def _nodes(raw: bytes, piece: int, what: str = "scontrol show node --json"):
    return streamed(raw, piece, what, stream=NodesStream)


@pytest.mark.parametrize("piece", [1, 3, 64, 4096, 1 << 20])
def test_recorded_node_answers_of_three_releases_read_the_same_in_any_pieces(piece):
    assert len(NODES_RECORDED) == 6      # scontrol 24.11 and 26.05, sinfo 22.05, REST x 3
    for path in NODES_RECORDED:
        raw = path.read_bytes()
        want = _whole_tree(raw.decode())
        assert want and isinstance(want, list), path
        assert parse_nodes_json(raw.decode()) == want, path
        assert _nodes(raw, piece) == want, (path, piece)


@pytest.mark.parametrize("piece", [1, 1 << 20])
def test_the_aggregated_sinfo_of_24_11_and_26_05_is_the_same_error_read_either_way(piece):
    assert [p.parent.name for p in SINFO_AGGREGATED] == ["24.11", "26.05"]
    for path in SINFO_AGGREGATED:
        text = path.read_text()
        want = _whole_tree(text)
        assert want[0] is ParseError and "23.02+ aggregates sinfo" in want[1]
        assert _whole(text) == want and _nodes(text.encode(), piece) == want


@pytest.mark.parametrize("text", ODD_NODE_ANSWERS)
@pytest.mark.parametrize("piece", [1, 7, 1 << 16])
def test_odd_node_answers_give_the_same_nodes_or_error_or_are_read_again_whole(text, piece):
    want = _whole(text)
    assert want == _whole_tree(text)      # the whole-text reader says what it said before
    got = _nodes(text.encode(), piece)
    if isinstance(want, list):
        assert got == want
    else:
        assert got == want or (isinstance(got, tuple) and got[0] == "surprise"), (got, want)


def test_which_odd_node_answers_are_read_again_whole_and_what_the_others_say():
    surprises = [t for t in ODD_NODE_ANSWERS if surprised(t, NodesStream)]
    # not an object, trailing data, cut short, too deep, empty: nothing else
    assert len(surprises) == 5, surprises
    said = {t: _nodes(t.encode(), 1 << 16) for t in ODD_NODE_ANSWERS if t not in surprises}
    assert "Unable to contact slurm controller" in said[ODD_NODE_ANSWERS[2]][1]
    assert "node n2" in said[ODD_NODE_ANSWERS[4]][1]
    assert "23.02+ aggregates sinfo" in said[ODD_NODE_ANSWERS[6]][1]


# -- through a command, as the backend reads it --------------------------------------------------

def _fake_slurm(tmp_path, answer) -> SlurmCommands:
    body = (f"import shutil, sys\nshutil.copyfileobj(open({str(answer)!r}, 'rb'), sys.stdout.buffer)")
    for name, text in (("scontrol", "import sys\n"
                                    "if sys.argv[1:] == ['--version']:\n"
                                    "    print('slurm 24.11.5'); sys.exit(0)\n" + body),):
        p = tmp_path / name
        p.write_text(f"#!{sys.executable}\n{text}\n")
        p.chmod(p.stat().st_mode | stat.S_IEXEC)
    return SlurmCommands(bin_dir=str(tmp_path), sleep=lambda s: None)


@pytest.mark.parametrize("text", ODD_NODE_ANSWERS)
def test_through_scontrol_an_odd_answer_gives_the_whole_text_readers_nodes_or_error(tmp_path, text):
    answer = tmp_path / "answer.json"
    answer.write_bytes(text.encode())
    cmds = _fake_slurm(tmp_path, answer)
    try:
        got = CommandLineSource(cmds).nodes()
    except ParseError as exc:
        got = type(exc), str(exc)
    assert got == _whole(text, WHAT)
    # scontrol show node asked again only when the stream was surprised (+1: --version)
    assert cmds.calls == (3 if surprised(text, NodesStream) else 2)


def test_a_large_node_list_is_never_held_whole(tmp_path):
    raw = nodes_like(5000)
    answer = tmp_path / "answer.json"
    answer.write_bytes(raw)
    cmds = _fake_slurm(tmp_path, answer)
    CommandLineSource(cmds).nodes()           # (scontrol --version asked once, outside the count)
    tracemalloc.start()
    try:
        streamed_nodes = CommandLineSource(cmds).nodes()
        peak_streamed = tracemalloc.get_traced_memory()[1]
        tracemalloc.reset_peak()
        text = cmds.run("scontrol", "show", "node", "--json=v0.0.42")
        whole = [node_from_json(n, WHAT) for n in json.loads(text)["nodes"]]
        del text
        peak_whole = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert streamed_nodes == whole and len(whole) == 5000
    assert whole[-1].name == "node004999"
    # the whole read holds the bytes, the text and the tree (8.4 MB of JSON here); the
    # stream holds the nodes read (about 0.5 KB each) and a piece or two
    assert peak_streamed < peak_whole / 4, (peak_streamed, peak_whole)
    assert peak_streamed < len(raw) / 2, (peak_streamed, len(raw))
