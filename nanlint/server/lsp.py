"""The language server proper (pygls): diagnostics on open, change and save; code actions
for each fix (safe ones preferred), "fix all safe" and "ignore CODE on this line".

Documents are linted as the editor holds them (unsaved text included), with the settings of
the nearest pyproject.toml above the file."""

from __future__ import annotations

from pathlib import Path
from typing import Dict, List, Optional, Sequence, Tuple

from lsprotocol import types
from pygls.lsp.server import LanguageServer
from pygls.uris import to_fs_path
from pygls.workspace import TextDocument

from ..core.diagnostics import SAFE, Diagnostic, Edit, Position
from ..core.install import version
from ..lint.engine import IO_ERROR, SYNTAX_ERROR
from ..rules.pages import rule_url
from .edits import LINTED_SUFFIXES, Linted, fix_all_safe, ignore_edit, lint_document

SOURCE = "nanlint"
FIX_ALL_KIND = f"{types.CodeActionKind.SourceFixAll.value}.nanlint"


class NanlintServer(LanguageServer):
    def __init__(self) -> None:
        super().__init__("nanlint", version(), text_document_sync_kind=types.TextDocumentSyncKind.Incremental)
        # uri -> (document version, findings): code actions reuse the last lint.
        self.linted: Dict[str, Tuple[Optional[int], Linted]] = {}
        self.reported_errors: set = set()


server = NanlintServer()


def _path(uri: str) -> Optional[Path]:
    fs = to_fs_path(uri)
    return Path(fs) if fs else None


def _lsp_position(doc: TextDocument, p: Position) -> types.Position:
    """A nanlint position (1-based, characters) in the client's units (UTF-16 by default)."""
    lines = doc.lines
    row = p.row - 1
    if row >= len(lines):  # an insertion at the very end of the file
        return types.Position(line=len(lines), character=0)
    line = lines[row].rstrip("\r\n")
    return types.Position(line=row, character=doc.position_codec.client_num_units(line[: max(p.column - 1, 0)]))


def _range(doc: TextDocument, start: Position, end: Position) -> types.Range:
    return types.Range(start=_lsp_position(doc, start), end=_lsp_position(doc, end))


def _text_edits(doc: TextDocument, edits: Sequence[Edit]) -> List[types.TextEdit]:
    return [types.TextEdit(range=_range(doc, e.start, e.end), new_text=e.content) for e in edits]


def _lsp_diagnostic(doc: TextDocument, d: Diagnostic) -> types.Diagnostic:
    error = d.code in (SYNTAX_ERROR, IO_ERROR)
    return types.Diagnostic(
        range=_range(doc, d.start, d.end),
        message=d.message,
        severity=types.DiagnosticSeverity.Error if error else types.DiagnosticSeverity.Warning,
        code=d.code,
        code_description=None if error else types.CodeDescription(href=rule_url(d.code)),
        source=SOURCE,
        data={"fix": d.fix.applicability if d.fix else None},
    )


def _lint(ls: NanlintServer, uri: str) -> Optional[Linted]:
    doc = ls.workspace.get_text_document(uri)
    path = _path(uri)
    if path is None or path.suffix not in LINTED_SUFFIXES:
        return None
    cached = ls.linted.get(uri)
    if cached is not None and doc.version is not None and cached[0] == doc.version:
        return cached[1]
    linted = lint_document(path, doc.source)
    ls.linted[uri] = (doc.version, linted)
    if linted.config_error and linted.config_error not in ls.reported_errors:
        ls.reported_errors.add(linted.config_error)
        ls.window_show_message(types.ShowMessageParams(
            type=types.MessageType.Error, message=f"nanlint: {linted.config_error} (using the default settings)"
        ))
    return linted


def _publish(ls: NanlintServer, uri: str) -> None:
    linted = _lint(ls, uri)
    if linted is None:
        return
    doc = ls.workspace.get_text_document(uri)
    ls.text_document_publish_diagnostics(types.PublishDiagnosticsParams(
        uri=uri, version=doc.version, diagnostics=[_lsp_diagnostic(doc, d) for d in linted.diagnostics]
    ))


@server.feature(types.TEXT_DOCUMENT_DID_OPEN)
def did_open(ls: NanlintServer, params: types.DidOpenTextDocumentParams) -> None:
    _publish(ls, params.text_document.uri)


@server.feature(types.TEXT_DOCUMENT_DID_CHANGE)
def did_change(ls: NanlintServer, params: types.DidChangeTextDocumentParams) -> None:
    _publish(ls, params.text_document.uri)


@server.feature(types.TEXT_DOCUMENT_DID_SAVE)
def did_save(ls: NanlintServer, params: types.DidSaveTextDocumentParams) -> None:
    # The settings may have changed with the save (a pyproject.toml edited meanwhile).
    ls.linted.pop(params.text_document.uri, None)
    _publish(ls, params.text_document.uri)


@server.feature(types.TEXT_DOCUMENT_DID_CLOSE)
def did_close(ls: NanlintServer, params: types.DidCloseTextDocumentParams) -> None:
    ls.linted.pop(params.text_document.uri, None)
    ls.text_document_publish_diagnostics(types.PublishDiagnosticsParams(uri=params.text_document.uri, diagnostics=[]))


def _wanted(kind: str, only: Optional[Sequence[str]]) -> bool:
    """Whether the client's `only` filter admits `kind` (`source.fixAll` admits ours)."""
    return not only or any(kind == str(k) or kind.startswith(f"{k}.") for k in only)


def _overlaps(d: Diagnostic, r: types.Range) -> bool:
    # Rows only: a cursor anywhere on a flagged line offers its actions.
    return d.start.row - 1 <= r.end.line and r.start.line <= d.end.row - 1


@server.feature(
    types.TEXT_DOCUMENT_CODE_ACTION,
    types.CodeActionOptions(
        code_action_kinds=[types.CodeActionKind.QuickFix, FIX_ALL_KIND],
        resolve_provider=False,
    ),
)
def code_actions(ls: NanlintServer, params: types.CodeActionParams) -> List[types.CodeAction]:
    uri = params.text_document.uri
    linted = _lint(ls, uri)
    if linted is None:
        return []
    doc = ls.workspace.get_text_document(uri)
    wants_quickfix = _wanted(types.CodeActionKind.QuickFix.value, params.context.only)
    wants_fix_all = _wanted(FIX_ALL_KIND, params.context.only)
    actions: List[types.CodeAction] = []
    if wants_quickfix:
        for d in linted.diagnostics:
            if not _overlaps(d, params.range) or d.code in (SYNTAX_ERROR, IO_ERROR):
                continue
            diagnostic = _lsp_diagnostic(doc, d)
            if d.fix is not None:
                safe = d.fix.applicability == SAFE
                title = f"{d.fix.message} ({d.code})" if safe else f"{d.fix.message} ({d.code}, unsafe: changes values or statement order)"
                actions.append(types.CodeAction(
                    title=title,
                    kind=types.CodeActionKind.QuickFix,
                    diagnostics=[diagnostic],
                    is_preferred=safe,
                    edit=types.WorkspaceEdit(changes={uri: _text_edits(doc, d.fix.edits)}),
                ))
            edit = ignore_edit(doc.source, d)
            if edit is not None:
                actions.append(types.CodeAction(
                    title=f"Ignore {d.code} on this line",
                    kind=types.CodeActionKind.QuickFix,
                    diagnostics=[diagnostic],
                    edit=types.WorkspaceEdit(changes={uri: _text_edits(doc, [edit])}),
                ))
    if wants_fix_all and any(d.is_fixable(False) for d in linted.diagnostics):
        path = _path(uri)
        fixed = fix_all_safe(path, doc.source, linted) if path is not None else None
        if fixed is not None:
            whole = types.Range(start=types.Position(line=0, character=0), end=types.Position(line=len(doc.lines), character=0))
            actions.append(types.CodeAction(
                title="nanlint: apply all safe fixes",
                kind=FIX_ALL_KIND,
                edit=types.WorkspaceEdit(changes={uri: [types.TextEdit(range=whole, new_text=fixed)]}),
            ))
    return actions


def start() -> None:
    server.start_io()
