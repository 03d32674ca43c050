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

A file LibCST could parse but not in bounded time is reported here too, at the statement, before
LibCST sees it: an expression nested more than 1,000 levels deep (a generated sum of 1,000
terms), or expressions deeper than 100 levels that add up to more than 5,000 levels in one
file. LibCST's parse time grows faster than the square of the depth (a 2,000-term sum takes
11 s, 20,000 terms minutes), and a parse runs in native code, which `file-timeout` cannot
interrupt. Split the expression (a loop, `sum(...)`, or partial sums), or exclude the file.
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
