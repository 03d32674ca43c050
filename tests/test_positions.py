"""positions.py records the ranges LibCST's PositionProvider gives, node for node: on every
fixture and on sources whose line breaks, strings and blocks are unusual."""

from __future__ import annotations

from pathlib import Path

import libcst as cst
import pytest
from libcst.metadata import PositionProvider

from nanlint.core.context import position_map
from nanlint.core.positions import fast_position_map

FIXTURES = sorted((Path(__file__).resolve().parent.parent / "fixtures").glob("*.py"))

ODD_SOURCES = {
    "empty": "",
    "only a newline": "\n",
    "no trailing newline": "x = 1",
    "crlf": "import torch\r\ndef f(x):\r\n    return torch.log(\r\n        x)\r\n",
    "lone cr": "x = 1\ry = (2 +\r 3)\n",
    "tabs and continuation": "if True:\n\tx = 1 + \\\n\t    2\n",
    "multi-line strings": 's = """a\nb\r\nc"""\nt = f"""{s}\n"""\nu = (\n  "x"\n  "y")\n',
    "decorators and comments": "# c\n\n@d(\n  1)\n@e\ndef f(  # here\n    a,\n):  # end\n    pass\n",
    "semicolons and suites": "a = 1; b = 2\nif a: b = 3; c = 4\nclass C: pass\n",
    "match and walrus": "match p:\n    case [x, *rest] if (n := len(rest)) > 1:\n        pass\n",
}


def provider_map(module: cst.Module):
    provider = PositionProvider()
    provider._gen_impl(module)
    return provider._computed


def assert_same_ranges(module: cst.Module) -> None:
    expected = provider_map(module)
    got = fast_position_map(module)
    assert len(got) == len(expected)
    for node, r in expected.items():
        assert got[node] == r, (type(node).__name__, r, got[node])


@pytest.mark.parametrize("name", sorted(ODD_SOURCES))
def test_odd_sources(name):
    assert_same_ranges(cst.parse_module(ODD_SOURCES[name]))


def test_every_fixture():
    assert FIXTURES
    for path in FIXTURES:
        assert_same_ranges(cst.parse_module(path.read_text(encoding="utf-8")))


def test_lookups_answer_as_the_provider_did():
    module = cst.parse_module("import torch\ny = torch.log(\n    x)\n")
    positions = position_map(module)
    call = module.body[1].body[0].value
    assert positions[call].start.line == 2 and positions[call].start.column == 4
    assert positions[call].end.line == 3 and positions[call].end.column == 6
    assert positions.get(cst.Name("elsewhere")) is None
