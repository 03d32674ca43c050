"""Findings to verify: linted now, or read back from `nanlint check --output-format json`.

This module does not import torch.
"""

from __future__ import annotations

import json
import os
import unicodedata
from dataclasses import dataclass
from typing import Any, Dict, List, Optional, Sequence, Set, Tuple

from ..run.config import Settings, select_rules
from ..core.diagnostics import INPUT_KINDS, RELATIONS, Diagnostic, Edit, Fix, Position, Probe, ProbeInput, Step
from ..rules import all_rules


def printable(text: str) -> str:
    """`text` with control characters (ANSI escapes, CR, NUL, bidi overrides...) shown as
    escapes, so that a name from a findings file cannot drive the terminal."""
    out = []
    for ch in str(text):
        cat = unicodedata.category(ch)
        if cat in ("Cc", "Cf", "Zl", "Zp", "Cs") and ch not in ("\n", "\t"):
            out.append(ch.encode("unicode_escape", "backslashreplace").decode("ascii"))
        else:
            out.append(ch)
    return "".join(out)


def printable_line(text: str) -> str:
    """As `printable`, and on one line (newlines and tabs escaped too)."""
    return printable(text).replace("\n", "\\n").replace("\t", "\\t")


class FindingsError(Exception):
    """The findings file cannot be read: one line, exit code 2."""


@dataclass
class Findings:
    diagnostics: List[Diagnostic]
    errors: List[str]


def _position(raw: Any, where: str) -> Position:
    if not isinstance(raw, dict) or not isinstance(raw.get("row"), int) or not isinstance(raw.get("column"), int):
        raise FindingsError(f"{where}: expected {{'row': int, 'column': int}}")
    return Position(raw["row"], raw["column"])


def _probe(raw: Any, where: str) -> Optional[Probe]:
    if raw is None:
        return None
    if not isinstance(raw, dict):
        raise FindingsError(f"{where}: `probe` must be an object or null")
    inputs = []
    for i, item in enumerate(raw.get("inputs") or []):
        if not isinstance(item, dict) or not isinstance(item.get("name"), str):
            raise FindingsError(f"{where}: probe input {i} must have a string `name`")
        value = item.get("value")
        if value is not None and (isinstance(value, bool) or not isinstance(value, (int, float))):
            raise FindingsError(f"{where}: probe input {item['name']}: `value` must be a number or null")
        domain = item.get("domain")
        if domain is not None:
            if not isinstance(domain, list) or len(domain) != 2:
                raise FindingsError(f"{where}: probe input {item['name']}: `domain` must be [low, high]")
            domain = tuple(_number(d, where) for d in domain)
        kind = item.get("kind", "real")
        if kind not in INPUT_KINDS:
            raise FindingsError(f"{where}: probe input {item['name']}: `kind` must be one of {', '.join(INPUT_KINDS)}")
        dim = item.get("dim")
        if dim is not None and (isinstance(dim, bool) or not isinstance(dim, int)):
            raise FindingsError(f"{where}: probe input {item['name']}: `dim` must be an integer or null")
        evidence = item.get("evidence") or ""
        if not isinstance(evidence, str):
            raise FindingsError(f"{where}: probe input {item['name']}: `evidence` must be a string")
        inputs.append(
            ProbeInput(item["name"], float(value) if value is not None else None, domain, kind, dim, evidence)
        )
    relations = []
    for rel in raw.get("relations") or []:
        if (
            not isinstance(rel, list) or len(rel) != 3 or not all(isinstance(r, str) for r in rel)
            or rel[1] not in RELATIONS
        ):
            raise FindingsError(f"{where}: a probe relation must be [name, op, name] with op one of {' '.join(RELATIONS)}")
        relations.append(tuple(rel))
    params = raw.get("params") or {}
    if not isinstance(params, dict):
        raise FindingsError(f"{where}: probe `params` must be an object")
    for key in ("original", "fixed", "harness"):
        if raw.get(key) is not None and not isinstance(raw.get(key), str):
            raise FindingsError(f"{where}: probe `{key}` must be a string or null")
    kind = raw.get("kind")
    if not isinstance(kind, str):
        raise FindingsError(f"{where}: probe `kind` must be a string")
    return Probe(
        kind=kind,
        original=raw.get("original"),
        fixed=raw.get("fixed"),
        inputs=tuple(inputs),
        harness=raw.get("harness"),
        params=tuple(params.items()),
        relations=tuple(relations),
    )


def _number(v: Any, where: str) -> float:
    # JSON written by Python may spell infinities `Infinity`; strings are accepted too.
    if isinstance(v, bool):
        raise FindingsError(f"{where}: expected a number")
    if isinstance(v, (int, float)):
        return float(v)
    if isinstance(v, str) and v.strip().lower() in ("inf", "+inf", "infinity", "-inf", "-infinity"):
        return float(v.strip().lower().replace("infinity", "inf"))
    raise FindingsError(f"{where}: expected a number, got {v!r}")


def _fix(raw: Any, where: str) -> Optional[Fix]:
    if raw is None:
        return None
    if not isinstance(raw, dict):
        raise FindingsError(f"{where}: `fix` must be an object or null")
    edits = []
    for e in raw.get("edits") or []:
        if not isinstance(e, dict) or not isinstance(e.get("content"), str):
            raise FindingsError(f"{where}: each fix edit needs a string `content`")
        edits.append(Edit(_position(e.get("location"), where), _position(e.get("end_location"), where), e["content"]))
    return Fix(str(raw.get("message") or ""), tuple(edits), str(raw.get("applicability") or "safe"))


# A probe the verifier cannot read becomes a probe of this kind: that finding alone is
# refused (with the reason), the others are verified.
MALFORMED = "malformed"
MAX_FINDINGS_BYTES = 64 * 1024 * 1024


def _malformed(reason: str) -> Probe:
    return Probe(kind=MALFORMED, params=(("reason", reason),))


def parse_findings(text: str, source: str = "findings") -> List[Diagnostic]:
    try:
        data = json.loads(text)
    except json.JSONDecodeError as exc:
        raise FindingsError(f"{source}: not JSON: {exc.msg} at line {exc.lineno}") from None
    except RecursionError:
        raise FindingsError(f"{source}: not a findings file: JSON nested too deeply") from None
    except (ValueError, MemoryError) as exc:  # e.g. an integer with too many digits
        raise FindingsError(f"{source}: not JSON: {str(exc).splitlines()[0][:120]}") from None
    if isinstance(data, dict) and isinstance(data.get("findings"), list):
        data = data["findings"]  # `nanlint verify --output-format json` output, read back
    if not isinstance(data, list):
        raise FindingsError(f"{source}: expected the JSON list of `nanlint check --output-format json`")
    out = []
    for n, item in enumerate(data):
        where = f"{source}: finding {n}"
        if not isinstance(item, dict):
            raise FindingsError(f"{where}: expected an object")
        for key in ("code", "message", "filename"):
            if not isinstance(item.get(key), str):
                raise FindingsError(f"{where}: missing string `{key}`")
        out.append(Diagnostic(
            path=item["filename"],
            start=_position(item.get("location"), where),
            end=_position(item.get("end_location") or item.get("location"), where),
            code=item["code"],
            name=str(item.get("name") or ""),
            message=item["message"],
            fix=_fix(item.get("fix"), where),
            probe=_probe_or_refusal(item.get("probe"), where),
            cell=_cell(item.get("cell"), where),
            evidence=_evidence(item.get("evidence"), where),
            latent=item.get("latent") is True,
        ))
    return out


def _evidence(raw: Any, where: str) -> Tuple[Step, ...]:
    """The located steps of a value finding's evidence (absent in older findings files)."""
    if raw is None:
        return ()
    if not isinstance(raw, list) or not all(isinstance(s, dict) and isinstance(s.get("note"), str) for s in raw):
        raise FindingsError(f"{where}: `evidence` must be a list of steps with a string `note`")
    steps = []
    for s in raw:
        row = s.get("row")
        if isinstance(row, bool) or not isinstance(row, int) or row < 0:
            raise FindingsError(f"{where}: an evidence step's `row` must be a whole number")
        path, cell = s.get("path"), s.get("cell")
        steps.append(Step(row, s["note"], path if isinstance(path, str) else None,
                          cell if isinstance(cell, int) and not isinstance(cell, bool) else None))
    return tuple(steps)


def _cell(raw: Any, where: str) -> Optional[int]:
    if raw is None:
        return None
    if isinstance(raw, bool) or not isinstance(raw, int) or raw < 1:
        raise FindingsError(f"{where}: `cell` must be a positive integer or null")
    return raw


def _probe_or_refusal(raw: Any, where: str) -> Optional[Probe]:
    try:
        return _probe(raw, where)
    except FindingsError as exc:
        return _malformed(str(exc).replace(f"{where}: ", "", 1))
    except (TypeError, ValueError, OverflowError, RecursionError) as exc:
        return _malformed(f"{type(exc).__name__}: {str(exc).splitlines()[0][:120] if str(exc) else ''}")


def read_findings(path: str) -> List[Diagnostic]:
    shown = printable(path)
    try:
        if path == "-":
            import sys

            stream = getattr(sys.stdin, "buffer", None)
            data = (stream.read(MAX_FINDINGS_BYTES + 1) if stream is not None
                    else sys.stdin.read(MAX_FINDINGS_BYTES + 1).encode("utf-8", "surrogateescape"))
            shown = "stdin"
        else:
            with open(path, "rb") as fh:
                data = fh.read(MAX_FINDINGS_BYTES + 1)
    except OSError as exc:
        raise FindingsError(f"cannot read {shown}: {exc.strerror or exc}") from None
    if len(data) > MAX_FINDINGS_BYTES:
        raise FindingsError(f"{shown}: larger than {MAX_FINDINGS_BYTES // (1024 * 1024)} MB")
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise FindingsError(f"{shown}: not UTF-8 (invalid byte at offset {exc.start})") from None
    return parse_findings(text, shown)


def selected(diagnostics: Sequence[Diagnostic], settings: Settings) -> List[Diagnostic]:
    """Keep the findings `--select/--ignore` (and the config) choose, as `check` would.
    A code this installation does not know is kept unless it is ignored."""
    chosen: Set[str] = {r.code for r in select_rules(settings)}
    known: Set[str] = {r.code for r in all_rules()}
    out = []
    for d in diagnostics:
        if d.code in chosen:
            out.append(d)
        elif d.code not in known and not any(d.code.startswith(s) or s == "ALL" for s in settings.ignore):
            out.append(d)
    return out


def lint_findings(paths: Sequence[str], settings: Settings) -> Findings:
    from ..run.runner import run

    result = run(paths, settings)
    return Findings(result.diagnostics, result.errors + result.internal_errors)


MAX_SOURCE_BYTES = 8 * 1024 * 1024


def under_roots(path: str, roots: Sequence[str]) -> bool:
    """Whether `path` (symlinks resolved) is a regular file inside one of `roots`."""
    try:
        real = os.path.realpath(path)
        if not os.path.isfile(real):
            return False
        for root in roots:
            top = os.path.realpath(root)
            if real == top or os.path.commonpath([real, top]) == top:
                return True
    except (OSError, ValueError):
        return False
    return False


def source_lines(d: Diagnostic, roots: Sequence[str] = ()) -> Optional[Dict[str, str]]:
    """The finding's lines before and after its fix (in a notebook, the finding's cell), when
    the file lies under one of `roots` (the paths the user linted) and can be read. A findings
    file may name any path: a report never quotes a file outside what the user asked to lint."""
    if not roots or not under_roots(d.path, roots):
        return None
    if d.cell is not None:
        from ..run.notebooks import cell_text

        text = cell_text(d.path, d.cell)
        if text is None:
            return None
        lines = text.splitlines(keepends=True)
    else:
        try:
            with open(d.path, "rb") as fh:
                data = fh.read(MAX_SOURCE_BYTES + 1)
            if len(data) > MAX_SOURCE_BYTES:
                return None
            lines = data.decode("utf-8").splitlines(keepends=True)
        except (OSError, UnicodeDecodeError):
            return None
    first, last = d.start.row, d.end.row
    if first < 1 or last > len(lines):
        return None
    before = "".join(lines[first - 1:last])
    after = None
    edits = [e for e in (d.fix.edits if d.fix else ()) if first <= e.start.row and e.end.row <= last]
    if edits:
        text = lines[first - 1:last]
        block = "".join(text)
        offsets = [0]
        for line in text:
            offsets.append(offsets[-1] + len(line))

        def at(p: Position) -> int:
            return offsets[p.row - first] + p.column - 1

        for e in sorted(edits, key=lambda e: (e.start.row, e.start.column), reverse=True):
            block = block[:at(e.start)] + e.content + block[at(e.end):]
        after = block
    return {"before": before, "after": after}
