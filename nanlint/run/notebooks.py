"""Jupyter notebooks: the code cells are linted as one module, in order (facts flow from cell
to cell as in a script), positions (and the lines messages cite) are mapped back to cells, and
fixes are written back into only the cells that changed, leaving every other byte of the file
(layout, metadata, outputs) as it was.

IPython syntax (`%timeit`, `%%bash` cells, `!pip install`, `?obj`, `obj?`, automagics such as
`cd data/` and `pip install timm`) is not Python: such lines are replaced by a `pass` that
carries a marker for the analysis, so line numbers stay put, and restored verbatim when the
cells are written back.

The file is read with the standard library (json); nbformat is not needed to lint.
"""

from __future__ import annotations

import ast
import dataclasses
import json
import re
from bisect import bisect_right
from dataclasses import dataclass, field
from json.decoder import scanstring
from pathlib import Path
from typing import Any, Dict, List, Optional, Sequence, Tuple, Type

from ..core.bounds import FileBudget, parse_refusal, quiet_python_parser
from ..core.diagnostics import Diagnostic, Edit, Fix, Position, Step
from ..core.text import unified_diff
from ..lint.engine import SYNTAX_ERROR, io_error, lint_source, not_parsed
from ..core.source import ChangedDuringRun, SourceFile, write_fixed
from ..lint.fixes import fix_source
from ..rules import Rule

SUFFIX = ".ipynb"

# A comment line before each cell's code in the joined module; never a suppression comment.
_CELL_MARK = "# nanlint-notebook-cell {index}"
_CELL_MARK_RE = re.compile(r"^# nanlint-notebook-cell (\d+)\r?\n?$")
# What a masked IPython line becomes: same indentation, so the block structure holds.
_MAGIC_RE = re.compile(r"^([ \t]*)pass  # nanlint-notebook-magic (\d+)$")
# Cell magics whose body is Python: only the `%%` line is masked.
_PYTHON_CELL_MAGICS = {"time", "timeit", "capture", "prun", "debug", "pypy"}
_LINE_MAGIC = re.compile(r"^[ \t]*[%!]")
_HELP = re.compile(r"^[ \t]*(\?{1,2}[ \t]*\S.*|[\w.\[\]()'\"]+\?{1,2}[ \t]*)$")
_ASSIGN_MAGIC = re.compile(r"^[ \t]*[\w.,\[\]() \t]+=[ \t]*[%!]")
# Line magics and shell aliases IPython runs without the `%` (automagic, on by default):
# `cd data/`, `ls -la`, `pip install timm`. Masked only where the line is not Python.
_AUTOMAGIC = re.compile(
    r"^[ \t]*(?:cd|ls|ll|pwd|pip|conda|mamba|cat|cp|mv|rm|rmdir|mkdir|less|more|man|clear|env|"
    r"load_ext|reload_ext|matplotlib|run|time|timeit|who|whos|history|bookmark|alias|store)"
    r"(?:[ \t]+\S.*)?$"
)
# A line of the module being linted, as messages cite it: "softmax at line 12", "(line 27)".
# (A line of another file is cited as `path:12`, never like this.)
_CITED_LINE = re.compile(r"(?<![\w.:/-])line (\d+)\b")


class NotebookError(Exception):
    """The file is not a notebook nanlint can read: one line for the user."""


# --- reading: values and where they are in the file ----------------------------------------

_WS = re.compile(r"[ \t\n\r]*")
_LITERAL = re.compile(r"-?(?:0|[1-9]\d*)(?:\.\d+)?(?:[eE][-+]?\d+)?|true|false|null|NaN|-?Infinity")


@dataclass
class _Node:
    """A JSON value's span in the file (`end` exclusive) and, for containers, its children."""

    start: int
    end: int
    items: Any = None  # list of _Node (array) or dict of key -> _Node (object)


def _scan(raw: str, i: int) -> Tuple[_Node, int]:
    """Spans of a JSON text json.loads has already accepted."""
    i = _WS.match(raw, i).end()
    c = raw[i]
    if c == '"':
        _, end = scanstring(raw, i + 1)
        return _Node(i, end), end
    if c in "[{":
        close = "]" if c == "[" else "}"
        items: Any = [] if c == "[" else {}
        j = _WS.match(raw, i + 1).end()
        if raw[j] == close:
            return _Node(i, j + 1, items), j + 1
        while True:
            j = _WS.match(raw, j).end()
            if c == "{":
                key, j = scanstring(raw, j + 1)
                j = _WS.match(raw, j).end() + 1  # the colon
                node, j = _scan(raw, j)
                items[key] = node
            else:
                node, j = _scan(raw, j)
                items.append(node)
            j = _WS.match(raw, j).end()
            if raw[j] == ",":
                j += 1
                continue
            return _Node(i, j + 1, items), j + 1
    m = _LITERAL.match(raw, i)
    if m is None:  # pragma: no cover - json.loads accepted the text
        raise NotebookError(f"unexpected character at offset {i}")
    return _Node(i, m.end()), m.end()


@dataclass
class Cell:
    number: int  # 1-based, counting every cell (markdown too), as ruff numbers them
    source: str
    span: Tuple[int, int]  # the raw `source` value: an array of strings or one string
    is_list: bool
    strings: List[Tuple[int, str]]  # (offset of the opening quote, decoded text) per string
    element_indent: Optional[str] = None  # whitespace before each array element
    close_indent: Optional[str] = None  # whitespace before the closing bracket


@dataclass
class Notebook:
    raw: str
    cells: List[Cell]  # the code cells, in order
    module: str  # the code cells joined, IPython lines masked
    # Module row (1-based) -> (index into `cells`, row in that cell); None on a marker line.
    rows: List[Optional[Tuple[int, int]]]
    masked: List[str]  # original text of each masked line
    ensure_ascii: bool
    # Code cells that do not parse on their own (index -> (row, column, message) in the cell):
    # blank in `module`, so the other cells are linted, and reported one by one.
    broken: Dict[int, Tuple[int, int, str]] = field(default_factory=dict)
    _line_starts: List[int] = field(default_factory=list)

    # --- positions --------------------------------------------------------------------

    def cell_position(self, p: Position) -> Tuple[Optional[int], Position]:
        """(cell index, position in that cell) of a module position."""
        row = min(max(p.row, 1), len(self.rows) - 1) if len(self.rows) > 1 else 1
        where = self.rows[row] if row < len(self.rows) else None
        if where is None:  # a marker line (a syntax error reported at a cell's edge)
            following = next((r for r in self.rows[row:] if r is not None), None)
            if following is None:
                return (len(self.cells) - 1 if self.cells else None), Position(1, 1)
            return following[0], Position(following[1], 1)
        return where[0], Position(where[1], p.column)

    def file_position(self, index: int, p: Position) -> Position:
        """Where a position in code cell `index` is in the notebook file (1-based row/column)."""
        cell = self.cells[index]
        lines = cell.source.split("\n")
        row = min(max(p.row, 1), len(lines))
        offset = sum(len(line) + 1 for line in lines[: row - 1]) + min(p.column - 1, len(lines[row - 1]))
        raw_index = self._raw_index(cell, offset)
        if not self._line_starts:
            self._line_starts = [0] + [m.end() for m in re.finditer("\n", self.raw)]
        file_row = bisect_right(self._line_starts, raw_index)
        return Position(file_row, raw_index - self._line_starts[file_row - 1] + 1)

    def _raw_index(self, cell: Cell, offset: int) -> int:
        if not cell.strings:
            return cell.span[0]
        for quote, text in cell.strings:
            # At a boundary, the start of the next string (a line's first column is there).
            if offset < len(text) or (quote, text) == cell.strings[-1]:
                break
            offset -= len(text)
        # Walk the escaped string: one decoded character per plain character or escape.
        i = quote + 1
        remaining = min(offset, len(text))
        raw = self.raw
        while remaining > 0:
            if raw[i] == "\\":
                if raw[i + 1] == "u":
                    unit = int(raw[i + 2 : i + 6], 16)
                    i += 12 if 0xD800 <= unit < 0xDC00 and raw[i + 6 : i + 8] == "\\u" else 6
                else:
                    i += 2
            else:
                i += 1
            remaining -= 1
        return i

    def cited(self, text: str) -> str:
        """`text` with each line of the joined module it cites ("at line 27", "(line 27)")
        named by its cell and its line there ("at cell 5, line 10"), as positions are. Code
        quoted between backticks is left as it is."""
        if "line " not in text:
            return text
        parts = text.split("`")
        for i in range(0, len(parts), 2):  # outside backticks
            parts[i] = _CITED_LINE.sub(self._cell_line, parts[i])
        return "`".join(parts)

    def _cell_line(self, match: "re.Match[str]") -> str:
        row = int(match.group(1))
        where = self.rows[row] if 0 < row < len(self.rows) else None
        if where is None:  # no line of a cell (a marker line, past the end): as it was
            return match.group(0)
        return f"cell {self.cells[where[0]].number}, line {where[1]}"

    def _step_in_cells(self, step: Step) -> Step:
        """An evidence step of the joined module, placed in its cell (its note's cited lines too)."""
        note = self.cited(step.note)
        where = self.rows[step.row] if step.path is None and 0 < step.row < len(self.rows) else None
        if where is None:
            return dataclasses.replace(step, note=note)
        return dataclasses.replace(step, note=note, row=where[1], cell=self.cells[where[0]].number)

    def to_cells(self, d: Diagnostic, module_lines: bool = True) -> Diagnostic:
        """The diagnostic with cell-relative positions, its cell number and its file region;
        the lines its message, fix title and probe evidence cite name their cells too
        (`module_lines=False`: the message already cites lines of its own cell)."""
        index, start = self.cell_position(d.start)
        if index is None:
            return d
        end_index, end = self.cell_position(d.end)
        if end_index != index:
            end = start
        cited = self.cited if module_lines else (lambda text: text)
        fix = d.fix
        if fix is not None:
            edits = []
            for e in fix.edits:
                _, s = self.cell_position(e.start)
                _, t = self.cell_position(e.end)
                edits.append(Edit(s, t, e.content))
            fix = Fix(cited(fix.message), tuple(edits), fix.applicability)
        probe = d.probe
        if probe is not None and any(i.evidence for i in probe.inputs):
            probe = dataclasses.replace(probe, inputs=tuple(
                dataclasses.replace(i, evidence=cited(i.evidence)) for i in probe.inputs))
        lines = self.cells[index].source.split("\n")
        evidence = tuple(self._step_in_cells(s) for s in d.evidence) if module_lines else d.evidence
        return dataclasses.replace(
            d,
            evidence=evidence,
            start=start,
            end=end,
            message=cited(d.message),
            fix=fix,
            probe=probe,
            cell=self.cells[index].number,
            file_start=self.file_position(index, start),
            file_end=self.file_position(index, end),
            line_text=lines[start.row - 1] if start.row <= len(lines) else d.line_text,
        )

    # --- writing ----------------------------------------------------------------------

    def cell_sources(self, module: str) -> List[str]:
        """Split a (fixed) module back into the code cells' sources, magics restored."""
        parts: List[List[str]] = [[] for _ in self.cells]
        current = 0
        for line in module.splitlines(keepends=True):
            mark = _CELL_MARK_RE.match(line)
            if mark:
                current = int(mark.group(1))
                continue
            body = line.rstrip("\r\n")
            magic = _MAGIC_RE.match(body)
            if magic:
                line = self.masked[int(magic.group(2))] + line[len(body):]
            parts[current].append(line)
        out = []
        for index, (cell, lines) in enumerate(zip(self.cells, parts)):
            text = "".join(lines)
            if index in self.broken:
                out.append(cell.source if not text.strip() else text)  # blank: as it was
                continue
            if not cell.source.endswith("\n") and text.endswith("\n"):
                text = text[:-1]  # the joiner's newline, not the cell's
            out.append(text)
        return out

    def with_sources(self, sources: Sequence[str]) -> str:
        """The file's text with the changed cells' sources replaced, nothing else touched."""
        pieces = []
        cursor = 0
        for cell, new in zip(self.cells, sources):
            if new == cell.source:
                continue
            pieces.append(self.raw[cursor : cell.span[0]])
            pieces.append(self._encode_source(cell, new))
            cursor = cell.span[1]
        pieces.append(self.raw[cursor:])
        return "".join(pieces)

    def _encode_source(self, cell: Cell, text: str) -> str:
        def dump(s: str) -> str:
            return json.dumps(s, ensure_ascii=self.ensure_ascii)

        if not cell.is_list:
            return dump(text)
        lines = re.findall(r"[^\n]*\n|[^\n]+$", text)
        if not lines:
            return "[]"
        if cell.element_indent is None:  # the array was on one line
            return "[" + ", ".join(dump(line) for line in lines) + "]"
        sep = ",\n" + cell.element_indent
        return "[\n" + cell.element_indent + sep.join(dump(line) for line in lines) + "\n" + (cell.close_indent or "") + "]"


def _indent_before(raw: str, index: int) -> Optional[str]:
    """The whitespace between the start of the line and `index`, if only whitespace is there."""
    line_start = raw.rfind("\n", 0, index) + 1
    before = raw[line_start:index]
    return before if before.strip() == "" and line_start > 0 else None


def _masked_cell(source: str, masked: List[str]) -> Tuple[str, Optional[Tuple[int, int, str]]]:
    """The cell's source with IPython-only lines replaced by a marked `pass`, and where the
    result fails to parse by itself (None where it parses)."""
    if _cell_syntax_error(source) is None:
        return source, None  # plain Python: nothing to mask (a `%` inside a string stays as it is)
    body = _mask(source, masked)
    return body, _cell_syntax_error(body)


def _mask(source: str, masked: List[str]) -> str:
    """`source` (which does not parse as it is) with IPython-only lines replaced by a marked
    `pass`."""
    lines = source.split("\n")
    first = next((i for i, line in enumerate(lines) if line.strip()), None)
    whole_cell = False
    if first is not None and lines[first].lstrip().startswith("%%"):
        name = lines[first].lstrip()[2:].split(None, 1)[0] if lines[first].strip() != "%%" else ""
        whole_cell = name not in _PYTHON_CELL_MAGICS  # %%bash, %%writefile, %%html: not Python
    out = []
    continued = False  # a masked line ending in a backslash continues the magic
    magic_indent = ""  # the indent of the line a continued magic began on
    for i, line in enumerate(lines):
        magic = (
            whole_cell and line.strip() != ""
            or i == first and line.lstrip().startswith("%%")
            or continued
            or _LINE_MAGIC.match(line) is not None
            or _HELP.match(line) is not None
            or _ASSIGN_MAGIC.match(line) is not None
            or _AUTOMAGIC.match(line) is not None and not _is_python(line.strip())
        )
        if magic:
            indent = re.match(r"[ \t]*", line).group(0)
            if whole_cell or i == first and line.lstrip().startswith("%%"):
                indent = ""
            elif continued:
                indent = magic_indent  # `    !cmd \` inside a block: its next lines stay in it
            else:
                magic_indent = indent
            masked.append(line)
            out.append(f"{indent}pass  # nanlint-notebook-magic {len(masked) - 1}")
            continued = line.rstrip().endswith("\\")
        else:
            out.append(line)
    return "\n".join(out)


def _is_python(line: str) -> bool:
    try:
        with quiet_python_parser():
            compile(line, "<line>", "exec", flags=ast.PyCF_ONLY_AST, dont_inherit=True)
        return True
    except (SyntaxError, ValueError):
        return False


def read_notebook(raw: str) -> Optional[Notebook]:
    """The notebook's code cells and joined module; None for a notebook in another language.
    Raises NotebookError (one line) when the text is not a notebook."""
    try:
        data = json.loads(raw)
    except json.JSONDecodeError as exc:
        raise NotebookError(
            f"not a valid notebook: invalid JSON ({exc.msg} at line {exc.lineno}, column {exc.colno}); "
            "the file was not linted"
        ) from None
    except RecursionError:
        raise NotebookError("not a valid notebook: the JSON is nested too deeply; the file was not linted") from None
    if not isinstance(data, dict) or not isinstance(data.get("cells"), list):
        hint = " (nbformat 3 notebooks are not supported: convert with `jupyter nbconvert --to notebook`)" if isinstance(data, dict) and "worksheets" in data else ""
        raise NotebookError(f"not a Jupyter notebook: no `cells` list at the top level{hint}; the file was not linted")
    metadata = data.get("metadata") if isinstance(data.get("metadata"), dict) else {}
    language = (metadata.get("language_info") or {}).get("name") if isinstance(metadata.get("language_info"), dict) else None
    if language is None and isinstance(metadata.get("kernelspec"), dict):
        language = metadata["kernelspec"].get("language")
    if isinstance(language, str) and language.lower() not in ("python", "python3"):
        return None  # an R or Julia notebook: nothing for a Python linter
    tree, _ = _scan(raw, 0)
    cells: List[Cell] = []
    for number, (cell, node) in enumerate(zip(data["cells"], tree.items["cells"].items), start=1):
        if not isinstance(cell, dict) or cell.get("cell_type") != "code" or "source" not in cell:
            continue
        value = cell["source"]
        span_node = node.items["source"]
        if isinstance(value, str):
            cells.append(Cell(number, value, (span_node.start, span_node.end), False, [(span_node.start, value)]))
        elif isinstance(value, list) and all(isinstance(v, str) for v in value):
            strings = [(n.start, v) for n, v in zip(span_node.items, value)]
            element_indent = _indent_before(raw, strings[0][0]) if strings else None
            close_indent = _indent_before(raw, span_node.end - 1) if strings else None
            cells.append(Cell(number, "".join(value), (span_node.start, span_node.end), True,
                              strings, element_indent, close_indent))
        else:
            raise NotebookError(f"not a valid notebook: cell {number} has a `source` that is not text; the file was not linted")
    masked: List[str] = []
    rows: List[Optional[Tuple[int, int]]] = [None]  # row 0 unused
    parts = []
    broken: Dict[int, Tuple[int, int, str]] = {}
    for index, cell in enumerate(cells):
        parts.append(_CELL_MARK.format(index=index) + "\n")
        rows.append(None)
        body, error = _masked_cell(cell.source, masked)
        if error is None:
            error = parse_refusal(body)  # a cell nested too deeply to parse: reported alone
        if error is not None:
            # Jupyter runs each cell on its own, so this one fails there too; blank lines
            # in its place keep every row where it was and let the other cells be linted.
            broken[index] = error
            body = "\n" * body.count("\n")
        if not body.endswith("\n"):
            body += "\n"
        parts.append(body)
        rows.extend((index, r) for r in range(1, body.count("\n") + 1))
    non_ascii_raw = any(ord(ch) > 127 for ch in raw)
    ensure_ascii = not non_ascii_raw and re.search(r"\\u00[89a-fA-F]|\\u0[1-9a-fA-F]|\\u[1-9a-fA-F]", raw) is not None
    return Notebook(raw, cells, "".join(parts), rows, masked, ensure_ascii, broken)


def _cell_syntax_error(body: str) -> Optional[Tuple[int, int, str]]:
    """(row, column, why) where a masked cell fails to parse by itself, or None (IPython
    allows `await` at the top of a cell)."""
    try:
        with quiet_python_parser():
            compile(body, "<cell>", "exec", flags=ast.PyCF_ONLY_AST | ast.PyCF_ALLOW_TOP_LEVEL_AWAIT,
                    dont_inherit=True)
    except SyntaxError as exc:
        return (exc.lineno or 1, exc.offset or 1, f"SyntaxError: {exc.msg}")
    except ValueError as exc:  # a NUL byte
        return (1, 1, f"SyntaxError: {exc}")
    except (RecursionError, MemoryError):  # nested deeper than Python's parser goes
        return parse_refusal(body) or (1, 1, "an expression nested deeper than Python's own parser allows")
    return None


def load(path: Path) -> Optional[Notebook]:
    try:
        data = path.read_bytes()
    except OSError as exc:
        raise NotebookError(f"cannot read file: {exc.strerror or exc}") from None
    try:
        raw = data.decode("utf-8-sig")
    except UnicodeDecodeError as exc:
        raise NotebookError(f"not a valid notebook: not UTF-8 (byte {data[exc.start]:#04x}); the file was not linted") from None
    return read_notebook(raw)


def cell_text(path: str, cell_number: int) -> Optional[str]:
    """The source of cell `cell_number` of the notebook at `path` (None when unreadable)."""
    try:
        notebook = load(Path(path))
    except NotebookError:
        return None
    if notebook is None:
        return None
    return next((c.source for c in notebook.cells if c.number == cell_number), None)


# --- the run: what the runner does for a .ipynb file -----------------------------------------


def check_notebook(
    path: Path,
    display: str,
    rules: Sequence[Type[Rule]],
    precision: Optional[str],
    out: Any,
    fix: bool = False,
    unsafe_fixes: bool = False,
    diff: bool = False,
    budget: Optional[FileBudget] = None,
) -> None:
    """Lint (and fix, or diff) one notebook file into `out`, a one_file.RunResult; `budget`
    is the file's analysis budget, as for a .py file."""
    try:
        data = path.read_bytes()
    except OSError as exc:
        out.diagnostics.append(io_error(display, f"cannot read file: {exc.strerror or exc}"))
        return
    try:
        raw = data.decode("utf-8-sig")
    except UnicodeDecodeError as exc:
        out.diagnostics.append(io_error(
            display, f"not a valid notebook: not UTF-8 (byte {data[exc.start]:#04x}); the file was not linted"
        ))
        return
    new_raw = fix_notebook_text(display, raw, rules, precision, out, fix or diff, unsafe_fixes, diff, budget)
    if new_raw != raw and fix and not diff:
        try:
            write_fixed(path, SourceFile(raw, "utf-8", data), new_raw)
        except ChangedDuringRun as exc:
            out.warnings.append(f"{display}: not fixed: {exc}")
        except OSError as exc:
            out.errors.append(f"cannot write {display}: {exc}")


def _note_skip(out: Any, display: str, result) -> None:
    if result.skipped:
        out.warnings.append(f"{display}: skipped: {result.skipped}")


def fix_notebook_text(
    display: str,
    raw: str,
    rules: Sequence[Type[Rule]],
    precision: Optional[str],
    out: Any,
    fix: bool = False,
    unsafe_fixes: bool = False,
    diff: bool = False,
    budget: Optional[FileBudget] = None,
) -> str:
    """Lint a notebook's text into `out` (cell-relative diagnostics); with `fix`, return the
    text with the fixed cells replaced (with `diff`, the per-cell diffs go to `out.diffs`)."""
    try:
        notebook = read_notebook(raw)
    except NotebookError as exc:
        out.diagnostics.append(io_error(display, str(exc)))
        return raw
    if notebook is None or not notebook.cells:
        return raw
    module = notebook.module
    out.diagnostics.extend(_broken_cells(display, notebook))
    if not fix:
        result = lint_source(display, module, rules, precision, budget=budget)
        _note_skip(out, display, result)
        out.diagnostics.extend(notebook.to_cells(d) for d in _ipython_syntax(module, result.diagnostics))
        out.internal_errors.extend(result.errors)
        return raw
    outcome = fix_source(display, module, rules, unsafe_fixes, precision, budget=budget)
    out.internal_errors.extend(outcome.remaining.errors)
    _note_skip(out, display, outcome.remaining)
    for d, reason in outcome.dropped:
        out.warnings.append(f"fix for {d.code} at {notebook.to_cells(d).where()} dropped: {reason}")
    if outcome.source == module:
        out.diagnostics.extend(notebook.to_cells(d) for d in _ipython_syntax(module, outcome.remaining.diagnostics))
        return raw
    sources = notebook.cell_sources(outcome.source)
    landed = [notebook.cells[i].number for i in notebook.broken if sources[i] != notebook.cells[i].source]
    if landed:  # an added import at the top of a cell that is kept as it was written
        out.errors.append(f"cannot fix {display}: a fix would edit cell {landed[0]}, which does not parse")
        out.diagnostics.extend(notebook.to_cells(d) for d in outcome.remaining.diagnostics)
        return raw
    new_raw = notebook.with_sources(sources)
    try:
        json.loads(new_raw)
    except ValueError as exc:  # never write a notebook that does not load
        out.errors.append(f"cannot fix {display}: the rewritten notebook would not be valid JSON ({exc})")
        out.diagnostics.extend(notebook.to_cells(d) for d in outcome.remaining.diagnostics)
        return raw
    # Positions of what remains are relative to the fixed cells.
    fixed = read_notebook(new_raw)
    assert fixed is not None
    out.diagnostics.extend(fixed.to_cells(d) for d in outcome.remaining.diagnostics)
    out.fixed += outcome.applied
    out.applied.extend((display, notebook.to_cells(d)) for d in outcome.applied_diagnostics)
    if diff:
        for cell, new in zip(notebook.cells, sources):
            if new != cell.source:
                out.diffs.append(unified_diff(f"{display}:cell {cell.number}", cell.source, new))
    return new_raw


def _broken_cells(display: str, notebook: Notebook) -> List[Diagnostic]:
    """A syntax error for each code cell that does not parse, at its place in the cell."""
    found = []
    for index, (row, column, why) in sorted(notebook.broken.items()):
        last = max(r for i, r in filter(None, notebook.rows) if i == index)
        module_row = notebook.rows.index((index, min(row, last)))  # an error at the end: its last row
        d = not_parsed(display, notebook.module, module_row, column, why)
        d = dataclasses.replace(d, message=f"{why} (this cell was not linted)")
        found.append(notebook.to_cells(d, module_lines=False))  # Python's "on line 3" is the cell's
    return found


def _ipython_syntax(module: str, diagnostics: List[Diagnostic]) -> List[Diagnostic]:
    """Drop a syntax error Python reports only because IPython allows `await` outside a
    function (the linter checks syntax as a script)."""
    if not any(_is_python_syntax_error(d) for d in diagnostics):
        return diagnostics
    try:
        with quiet_python_parser():
            compile(module, "<notebook>", "exec", flags=0x400 | ast.PyCF_ALLOW_TOP_LEVEL_AWAIT, dont_inherit=True)
    except (SyntaxError, ValueError, RecursionError, MemoryError):
        return diagnostics
    return [d for d in diagnostics if not _is_python_syntax_error(d)]


def _is_python_syntax_error(d: Diagnostic) -> bool:
    """A NAN001 for Python's syntax error (not a file refused for its depth, `parse_refusal`)."""
    return d.code == SYNTAX_ERROR and d.message.startswith("SyntaxError:")


