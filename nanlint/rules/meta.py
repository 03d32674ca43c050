"""Findings the engine itself reports about a file it could not lint."""

from __future__ import annotations

from .base import Rule


class SyntaxErrorRule(Rule):
    code = "NAN001"
    kind = "file"
    default_enabled = True
    fails_in = '—'
    name = "syntax-error"
    message = "The file does not parse; it was not linted"
    summary = "A file that does not parse is reported at the error position; the run goes on."
    why = """\
nanlint only lints what LibCST can parse. A file with a syntax error (or a Python version's
syntax LibCST does not know yet) is reported at the position of the error, so a CI gate does
not pass silently over it, and every other file is still linted. This finding cannot be
turned off by `--ignore`: fix the file or exclude it.
"""


class IOErrorRule(Rule):
    code = "NAN002"
    kind = "file"
    default_enabled = True
    fails_in = '—'
    name = "io-error"
    message = "The file could not be read or decoded; it was not linted"
    summary = "A file that cannot be read or decoded is reported; the run goes on."
    why = """\
A file nanlint cannot read (permissions) or decode (bytes that are not valid in its declared
encoding, UTF-8 by default) is reported with the reason, and every other file is still
linted. It is never written to.
"""
