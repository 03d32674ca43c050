"""`nanlint server` end to end: a real LSP client (pygls's) starts `python -m nanlint server`
over stdio, opens documents, receives diagnostics, asks for code actions, applies their edits
and sees the diagnostics go. No network, no GPU: the server is a local subprocess."""

from __future__ import annotations

import asyncio
import sys
from pathlib import Path
from typing import Dict, List

import pytest

pytest.importorskip("pygls")  # the `test` extra installs it; a bare install may not have it

from lsprotocol import types  # noqa: E402
from pygls.lsp.client import LanguageClient  # noqa: E402
from pygls.uris import from_fs_path  # noqa: E402

from nanlint.server.edits import ignore_edit  # noqa: E402
from nanlint.core.diagnostics import Diagnostic, Position  # noqa: E402

HAZARD = "import torch\n\n\ndef gate(z):\n    return 1 / (1 + torch.exp(-z))\n"
# The sample hazard's rule, NAN101 (a sigmoid written by hand, exact fix), is off by default:
# each project here turns it on in its configuration, which the server reads.
SAMPLE_ON = '[tool.nanlint]\nextend-select = ["NAN101"]\n'
# A safe fix (NAN101) and an unsafe one (NAN111: a clamp changes values; off by default too)
# in one file.
ACOS_ON = '[tool.nanlint]\nextend-select = ["NAN101", "NAN111"]\nlatent = true\n'
TWO = (
    "import torch\nimport torch.nn.functional as F\n\n\n"
    "def f(a, b, z):\n"
    "    g = 1 / (1 + torch.exp(-z))\n"
    "    t = torch.acos(F.cosine_similarity(a, b, dim=-1))\n"
    "    return g, t\n"
)
TIMEOUT = 60


def apply_text_edits(text: str, edits: List[types.TextEdit]) -> str:
    """Apply LSP edits as an editor does (ASCII text: UTF-16 units are characters)."""
    lines = text.splitlines(keepends=True)
    starts = [0]
    for line in lines:
        starts.append(starts[-1] + len(line))

    def offset(p: types.Position) -> int:
        if p.line >= len(lines):
            return len(text)
        return starts[p.line] + p.character

    for e in sorted(edits, key=lambda e: (e.range.start.line, e.range.start.character), reverse=True):
        text = text[: offset(e.range.start)] + e.new_text + text[offset(e.range.end):]
    return text


class Session:
    """One server process and the diagnostics it has published, per document."""

    def __init__(self, root: Path):
        self.root = root
        self.client = LanguageClient("nanlint-test", "1")
        self.published: Dict[str, List[types.Diagnostic]] = {}
        self.changed = asyncio.Condition()
        self.versions: Dict[str, int] = {}

        @self.client.feature(types.TEXT_DOCUMENT_PUBLISH_DIAGNOSTICS)
        async def on_diagnostics(params: types.PublishDiagnosticsParams) -> None:
            async with self.changed:
                self.published[params.uri] = params.diagnostics
                self.changed.notify_all()

        @self.client.feature(types.WINDOW_SHOW_MESSAGE)
        def on_message(params: types.ShowMessageParams) -> None:
            pass

    async def start(self) -> types.InitializeResult:
        await self.client.start_io(sys.executable, "-m", "nanlint", "server", cwd=str(self.root))
        result = await asyncio.wait_for(self.client.initialize_async(types.InitializeParams(
            capabilities=types.ClientCapabilities(),
            root_uri=from_fs_path(str(self.root)),
            process_id=None,
        )), TIMEOUT)
        self.client.initialized(types.InitializedParams())
        return result

    async def stop(self) -> None:
        await asyncio.wait_for(self.client.shutdown_async(None), TIMEOUT)
        self.client.exit(None)
        await asyncio.wait_for(self.client.stop(), TIMEOUT)

    async def diagnostics(self, uri: str) -> List[types.Diagnostic]:
        """The next diagnostics published for `uri` (each list is consumed once)."""
        async with self.changed:
            await asyncio.wait_for(self.changed.wait_for(lambda: uri in self.published), TIMEOUT)
            return list(self.published.pop(uri))

    def open(self, path: Path, text: str) -> str:
        uri = from_fs_path(str(path))
        self.versions[uri] = 1
        self.client.text_document_did_open(types.DidOpenTextDocumentParams(
            text_document=types.TextDocumentItem(uri=uri, language_id="python", version=1, text=text)
        ))
        return uri

    def change(self, uri: str, text: str) -> None:
        self.versions[uri] += 1
        self.client.text_document_did_change(types.DidChangeTextDocumentParams(
            text_document=types.VersionedTextDocumentIdentifier(uri=uri, version=self.versions[uri]),
            content_changes=[types.TextDocumentContentChangeWholeDocument(text=text)],
        ))

    async def actions(self, uri: str, diagnostic: types.Diagnostic, only=None) -> List[types.CodeAction]:
        return await asyncio.wait_for(self.client.text_document_code_action_async(types.CodeActionParams(
            text_document=types.TextDocumentIdentifier(uri=uri),
            range=diagnostic.range,
            context=types.CodeActionContext(diagnostics=[diagnostic], only=only),
        )), TIMEOUT)


def run_session(root: Path, scenario) -> None:
    async def main() -> None:
        session = Session(root)
        await session.start()
        try:
            await scenario(session)
        finally:
            await session.stop()

    asyncio.run(main())


def test_diagnostic_quick_fix_and_diagnostic_gone(tmp_path):
    (tmp_path / "pyproject.toml").write_text(SAMPLE_ON)
    path = tmp_path / "model.py"
    path.write_text(HAZARD, encoding="utf-8")

    async def scenario(s: Session) -> None:
        uri = s.open(path, HAZARD)
        (diag,) = await s.diagnostics(uri)
        assert diag.code == "NAN101" and diag.source == "nanlint"
        assert diag.code_description.href.endswith("/rules/form/NAN101.md")
        assert (diag.range.start.line, diag.range.start.character) == (4, 11)
        assert (diag.range.end.line, diag.range.end.character) == (4, 34)
        actions = await s.actions(uri, diag)
        fix = next(a for a in actions if a.is_preferred)
        assert fix.kind == types.CodeActionKind.QuickFix and "NAN101" in fix.title
        fixed = apply_text_edits(HAZARD, fix.edit.changes[uri])
        assert fixed == HAZARD.replace("1 / (1 + torch.exp(-z))", "torch.sigmoid(z)")
        s.change(uri, fixed)
        assert await s.diagnostics(uri) == []

    run_session(tmp_path, scenario)


def test_unsafe_fix_is_labelled_and_not_preferred_ignore_and_fix_all(tmp_path):
    (tmp_path / "pyproject.toml").write_text(ACOS_ON)
    path = tmp_path / "angles.py"
    path.write_text(TWO, encoding="utf-8")

    async def scenario(s: Session) -> None:
        uri = s.open(path, TWO)
        diags = await s.diagnostics(uri)
        assert sorted(d.code for d in diags) == ["NAN101", "NAN111"]
        acos = next(d for d in diags if d.code == "NAN111")
        actions = await s.actions(uri, acos)
        unsafe = [a for a in actions if a.edit and "unsafe" in a.title]
        assert len(unsafe) == 1 and not unsafe[0].is_preferred
        ignore = next(a for a in actions if a.title == "Ignore NAN111 on this line")
        ignored = apply_text_edits(TWO, ignore.edit.changes[uri])
        assert "    t = torch.acos(F.cosine_similarity(a, b, dim=-1))  # noqa: NAN111\n" in ignored
        s.change(uri, ignored)
        assert [d.code for d in await s.diagnostics(uri)] == ["NAN101"]

        # "Fix all safe" fixes NAN101 and leaves the unsafe NAN111 fix alone.
        s.change(uri, TWO)
        diags = await s.diagnostics(uri)
        fix_all = await s.actions(uri, diags[0], only=[types.CodeActionKind.SourceFixAll])
        (action,) = fix_all
        assert action.kind.startswith("source.fixAll")
        fixed = apply_text_edits(TWO, action.edit.changes[uri])
        assert "torch.sigmoid(z)" in fixed and "torch.acos(F.cosine_similarity(a, b, dim=-1))" in fixed
        s.change(uri, fixed)
        assert [d.code for d in await s.diagnostics(uri)] == ["NAN111"]

    run_session(tmp_path, scenario)


def test_settings_come_from_the_nearest_pyproject(tmp_path):
    # The root's settings keep the defaults (NAN101 on); legacy/ has its own pyproject.toml,
    # which selects NAN111 only.
    (tmp_path / "pyproject.toml").write_text(SAMPLE_ON, encoding="utf-8")
    legacy = tmp_path / "legacy"
    legacy.mkdir()
    (legacy / "pyproject.toml").write_text('[tool.nanlint]\nselect = ["NAN111"]\nlatent = true\n', encoding="utf-8")

    async def scenario(s: Session) -> None:
        kept = s.open(tmp_path / "a.py", TWO)
        assert [d.code for d in await s.diagnostics(kept)] == ["NAN101"]
        other = s.open(legacy / "b.py", TWO)
        assert [d.code for d in await s.diagnostics(other)] == ["NAN111"]

    run_session(tmp_path, scenario)


def test_ignore_edit_extends_an_existing_noqa():
    text = "x = f(y)  # noqa: NAN102\n"
    d = Diagnostic("m.py", Position(1, 5), Position(1, 9), "NAN101", "n", "m")
    edit = ignore_edit(text, d)
    assert text[: edit.start.column - 1] + edit.content + text[edit.end.column - 1:] == (
        "x = f(y)  # noqa: NAN102, NAN101\n"
    )
    assert ignore_edit("x = f(y)  # noqa\n", d) is None  # already suppresses everything
    assert ignore_edit("x = f(y) + \\\n    1\n", d) is None  # no comment after a backslash


def test_server_without_pygls_says_how_to_install(tmp_path):
    # A clean one-line error (exit 2) when pygls is missing, simulated by hiding it; the
    # command installs the extra where this nanlint came from (tests/test_install.py).
    import subprocess

    from nanlint.core.install import install_hint

    code = (
        "import sys; sys.modules['pygls'] = None; sys.modules['pygls.lsp'] = None; "
        "sys.modules['pygls.lsp.server'] = None; from nanlint.cli import main; main(['server'])"
    )
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert r.returncode == 2
    assert r.stderr.startswith(f"nanlint: error: the language server needs pygls: {install_hint('server')} (")
    assert "[server]" in install_hint("server")
    assert r.stderr.count("\n") == 1


def test_positions_are_in_utf16_units(tmp_path):
    # An emoji is one character for nanlint and two UTF-16 units for the client.
    text = 'import torch\n\n\ndef gate(z):\n    s = "😀"; g = 1 / (1 + torch.exp(-z))\n    return g\n'
    (tmp_path / "pyproject.toml").write_text(SAMPLE_ON)
    path = tmp_path / "emoji.py"

    async def scenario(s: Session) -> None:
        uri = s.open(path, text)
        (diag,) = await s.diagnostics(uri)
        line = text.splitlines()[4]
        start = line.index("1 / (")
        assert diag.range.start.character == start + 1  # one extra unit for the emoji
        assert diag.range.end.character == start + len("1 / (1 + torch.exp(-z))") + 1
        (fix,) = [a for a in await s.actions(uri, diag) if a.is_preferred]
        (edit,) = fix.edit.changes[uri]
        assert (edit.range.start.character, edit.new_text) == (start + 1, "torch.sigmoid(z)")

    run_session(tmp_path, scenario)


def test_a_file_too_deep_to_parse_gets_a_diagnostic_and_the_server_answers_the_next_request(tmp_path):
    """The issue's generated module (one 20,000-term sum): LibCST used to parse it for minutes
    inside the server, which answered nothing meanwhile."""
    (tmp_path / "pyproject.toml").write_text(SAMPLE_ON)
    deep = "import torch\na = torch.ones(3)\ny = " + " + ".join(["torch.exp(a)"] * 20_000) + "\n"

    async def scenario(s: Session) -> None:
        (diag,) = await s.diagnostics(s.open(tmp_path / "generated.py", deep))
        assert diag.code == "NAN001" and diag.range.start.line == 2
        assert diag.message.startswith("an expression nested 20,002 levels deep (nanlint reads expressions up to 1,000")
        (diag,) = await s.diagnostics(s.open(tmp_path / "model.py", HAZARD))
        assert diag.code == "NAN101"

    run_session(tmp_path, scenario)
