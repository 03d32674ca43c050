"""The `nanlint` command: `nanlint [check] PATHS`, `nanlint verify`, `nanlint rule CODE`, `nanlint rules`.

Exit codes (ruff's): 0 no finding remains, 1 findings remain, 2 usage/config/internal error.
"""

from __future__ import annotations

import difflib
import os
import re
import sys
import time
from collections import Counter
from typing import List, Optional, Sequence

import click

from .run.config import ConfigError, apply_cli, load_settings, parse_seconds, parse_size
from .core.diagnostics import Diagnostic
from .run.cache import open_cache
from .run.progress import progress_for
from .run.runner import run
from .output import FORMATS, render
from .rules import all_rules, get_rule
from .verify.command import verify_command  # imports no torch until `verify` runs


class _DefaultToCheck(click.Group):
    """`nanlint src/` means `nanlint check src/`, as `ruff src/` once meant `ruff check`."""

    def parse_args(self, ctx: click.Context, args: List[str]) -> List[str]:
        if args and _looks_like_command(args[0], self.commands):
            close = difflib.get_close_matches(args[0], list(self.commands), n=1)
            if close:
                raise click.UsageError(f"no such command '{args[0]}'; did you mean '{close[0]}'?")
            raise click.UsageError(
                f"no such command or path '{args[0]}' (commands: {', '.join(sorted(self.commands))})"
            )
        if not args or (args[0] not in self.commands and args[0] not in ("--help", "-h", "--version")):
            args = ["check"] + list(args)
        return super().parse_args(ctx, args)


def _looks_like_command(word: str, commands) -> bool:
    """A bare word that is neither a command nor an existing path (`nanlint chek`): a
    mistyped command, not a path to lint."""
    return (
        word not in commands
        and re.fullmatch(r"[A-Za-z][A-Za-z_-]*", word) is not None
        and not os.path.exists(word)
    )


def _print_version(ctx: click.Context, _param: click.Parameter, value: bool) -> None:
    """`nanlint 0.1.0`, with the commit where nanlint was installed from a git URL; the
    version is read only when asked for (reading package metadata costs start-up time)."""
    if not value or ctx.resilient_parsing:
        return
    from .core.install import version_line

    click.echo(f"nanlint {version_line()}")
    ctx.exit()


@click.group(cls=_DefaultToCheck, context_settings={"help_option_names": ["-h", "--help"]})
@click.option("--version", is_flag=True, expose_value=False, is_eager=True, callback=_print_version,
              help="Show the version and exit.")
def cli() -> None:
    """Find numerically unsafe PyTorch code (NaN/Inf hazards) and fix it."""


# The formats `--statistics` can be written in.
STATISTICS_FORMATS = ("text", "json")


def _plural(n: int, word: str) -> str:
    return f"{n} {word}{'' if n == 1 else 's'}"


@cli.command()
@click.argument("paths", nargs=-1, type=click.Path())
@click.option("--fix", is_flag=True, help="Apply safe fixes (exact in real arithmetic).")
@click.option("--unsafe-fixes", is_flag=True, help="Also apply (with --fix) or show fixes that change values or statement order.")
@click.option("--diff", is_flag=True, help="Print the fixes as a unified diff; write nothing.")
@click.option("--select", metavar="CODES", help="Comma-separated codes or prefixes to enable (replaces the config's `select`); ALL for every rule.")
@click.option("--extend-select", metavar="CODES", help="Codes or prefixes to enable on top of the selection.")
@click.option("--ignore", metavar="CODES", help="Codes or prefixes to disable.")
@click.option("--output-format", type=click.Choice(sorted(FORMATS)), default="text", show_default=True)
@click.option("--statistics", is_flag=True, help="Show a count per rule instead of each finding.")
@click.option("--exit-zero", is_flag=True, help="Exit 0 even when findings remain.")
@click.option("--force-exclude", is_flag=True, help="Apply excludes to files named on the command line too (for pre-commit).")
@click.option("--lint-tests", is_flag=True, help="Lint test files too (tests/, test_*.py, *_test.py, conftest.py), which a directory walk skips by default.")
@click.option("--latent", is_flag=True, help="Also report the value rules' latent findings: those with no evidence that the value reaches the hazard (they depend on what callers or data pass).")
@click.option("--config", "config_path", metavar="PATH", help="Read settings from this TOML file instead of the nearest pyproject.toml.")
@click.option("--max-file-size", metavar="SIZE", help="Skip larger files with a warning (bytes, or 512KB, 2MB; 0: no limit). Default 1MB.")
@click.option("--file-timeout", metavar="SECONDS", type=float, help="Report a file as skipped when its analysis uses more CPU time (0: no limit). Default 30.")
@click.option("--file-memory", metavar="SIZE", help="Report a file as skipped when its analysis grows memory by more (bytes, or 512MB, 2GB; 0: no limit). Default 1GB.")
@click.option("--stdin-filename", metavar="PATH", help="Read the source from stdin and lint it as PATH (settings and per-file-ignores apply by that name).")
@click.option("--show-fixes", is_flag=True, help="With --fix, list the fixes applied, per file and rule.")
@click.option("--no-color", is_flag=True, help="No colours, even on a terminal (so does the NO_COLOR variable).")
@click.option("-q", "--quiet", is_flag=True, help="Print the findings only: no summary, no hints.")
@click.option("-v", "--verbose", is_flag=True, help="Also print the settings file, each file checked and the time taken (on stderr).")
@click.option("--jobs", "-j", type=click.IntRange(min=0), metavar="N", help="Lint in N worker processes (default: the config's `jobs`, else one per usable CPU; 1: no workers; 0: one per usable CPU).")
@click.option("--no-cache", is_flag=True, help="Neither read nor write the result cache.")
@click.option("--cache-dir", metavar="PATH", help="Keep the result cache here (default: $NANLINT_CACHE_DIR, the config's `cache-dir`, else .nanlint_cache at the project root).")
def check(
    paths: Sequence[str],
    fix: bool,
    unsafe_fixes: bool,
    diff: bool,
    select: Optional[str],
    extend_select: Optional[str],
    ignore: Optional[str],
    output_format: str,
    statistics: bool,
    exit_zero: bool,
    force_exclude: bool,
    lint_tests: bool,
    latent: bool,
    config_path: Optional[str],
    max_file_size: Optional[str],
    file_timeout: Optional[float],
    file_memory: Optional[str],
    stdin_filename: Optional[str],
    show_fixes: bool,
    no_color: bool,
    quiet: bool,
    verbose: bool,
    jobs: Optional[int],
    no_cache: bool,
    cache_dir: Optional[str],
) -> None:
    """Lint PATHS (default: the current directory); `-` reads the source from stdin."""
    _refuse_combinations(diff=diff, fix=fix, statistics=statistics, show_fixes=show_fixes,
                         output_format=output_format)
    started = time.perf_counter()
    settings = load_settings(config_path)
    settings = apply_cli(settings, select, extend_select, ignore)
    if max_file_size is not None:
        settings.max_file_size = parse_size(max_file_size, "--max-file-size")
    if file_timeout is not None:
        settings.file_timeout = parse_seconds(file_timeout, "--file-timeout")
    if file_memory is not None:
        settings.file_memory = parse_size(file_memory, "--file-memory")
    settings.force_exclude = settings.force_exclude or force_exclude
    settings.lint_tests = settings.lint_tests or lint_tests
    settings.latent = settings.latent or latent
    if verbose:
        where = settings.source or "no [tool.nanlint] table found: defaults"
        click.echo(f"nanlint: settings: {where}", err=True)
    from_stdin = list(paths) == ["-"] or (stdin_filename is not None and not paths)
    if stdin_filename is not None and not from_stdin:
        raise click.UsageError("--stdin-filename reads the source from stdin: give no PATHS (or `-`)")
    if "-" in paths and not from_stdin:
        raise click.UsageError("`-` (stdin) cannot be mixed with other PATHS")
    color = _use_color(no_color)
    sources = None
    stdout_source = None
    if from_stdin:
        from .run.runner import run_stdin, stdin_display

        text = click.get_text_stream("stdin").read()
        result, fixed_text = run_stdin(text, stdin_filename, settings, fix=fix, unsafe_fixes=unsafe_fixes, diff=diff)
        sources = {stdin_display(stdin_filename): fixed_text}  # for --output-format full
        if fix and not diff:
            stdout_source = fixed_text
    else:
        if verbose:
            from .run.files import discover

            for path in discover(list(paths) or ["."], settings):
                click.echo(f"nanlint: checking {path.as_posix()}", err=True)
        result = run(
            paths, settings, fix=fix, unsafe_fixes=unsafe_fixes, diff=diff,
            jobs=jobs or None,
            cache=None if no_cache else open_cache(settings, cache_dir),
            progress=progress_for(quiet),
        )
    diagnostics, errors, fixed = result.diagnostics, result.errors, result.fixed
    for message in result.warnings:
        click.echo(f"nanlint: warning: {message}", err=True)
    for message in result.internal_errors + errors:
        click.echo(f"nanlint: error: {message}", err=True)
    if verbose:
        click.echo(f"nanlint: done in {time.perf_counter() - started:.2f} s", err=True)

    if diff:
        sys.stdout.write("".join(result.diffs))
        if not quiet:
            if fixed:
                click.echo(f"Would fix {_plural(fixed, 'problem')}.", err=True)
            else:
                click.echo("No fixes to apply.", err=True)
            _print_unsafe_hint(diagnostics, unsafe_fixes, err=True)
        sys.exit(2 if errors else (1 if fixed and not exit_zero else 0))

    # With --fix on stdin the fixed source owns stdout; the report goes to stderr.
    report_err = stdout_source is not None
    if stdout_source is not None:
        sys.stdout.write(stdout_source)
    if statistics:
        _print_statistics(diagnostics, output_format, unsafe_fixes, err=report_err)
    else:
        click.echo(
            render(output_format, diagnostics, unsafe_fixes=unsafe_fixes, color=color, sources=sources),
            nl=False, err=report_err, color=color,
        )
    if output_format in ("text", "concise", "full") and not quiet:
        if show_fixes and fix and result.applied:
            _print_fixes(result.applied, err=report_err)
        _print_summary(diagnostics, fix, fixed, unsafe_fixes, err=report_err, linted=result.files)
    if errors:
        sys.exit(2)
    # A rule's internal error cost only its own piece: the exit code follows the findings.
    sys.exit(1 if diagnostics and not exit_zero else 0)


def _refuse_combinations(diff: bool, fix: bool, statistics: bool, show_fixes: bool, output_format: str) -> None:
    """Options that cannot act together are a usage error (exit 2), never one silently ignored."""
    if statistics and output_format not in STATISTICS_FORMATS:
        raise click.UsageError(
            f"--statistics cannot be written as --output-format {output_format} "
            f"(use {' or '.join(STATISTICS_FORMATS)})"
        )
    if diff and statistics:
        raise click.UsageError("--diff prints the fixes as a diff, not findings: it cannot be combined with --statistics")
    if diff and output_format not in ("text", "concise"):
        raise click.UsageError(
            f"--diff prints the fixes as a unified diff: it cannot be written as --output-format {output_format} "
            "(drop --diff to report the findings in that format)"
        )
    if show_fixes and (diff or not fix):
        raise click.UsageError("--show-fixes lists the fixes --fix applied: use it with --fix"
                               + (" and without --diff, which applies none" if diff else ""))


def _use_color(no_color: bool) -> bool:
    """Colours only on a terminal, and never with --no-color or a non-empty NO_COLOR."""
    if no_color or os.environ.get("NO_COLOR"):
        return False
    stream = sys.stdout
    return hasattr(stream, "isatty") and stream.isatty()


def _print_fixes(applied, err: bool = False) -> None:
    """ruff's --show-fixes: the fixes applied, per file and rule."""
    per_file: dict = {}
    for display, d in applied:
        per_file.setdefault(display, Counter())[(d.code, d.name)] += 1
    total = sum(sum(c.values()) for c in per_file.values())
    click.echo(f"Fixed {_plural(total, 'problem')}:", err=err)
    for display in sorted(per_file):
        click.echo(f"- {display}:", err=err)
        for (code, name), count in sorted(per_file[display].items()):
            click.echo(f"    {count} × {code} ({name})", err=err)


def _print_statistics(diagnostics: List[Diagnostic], fmt: str, unsafe: bool, err: bool = False) -> None:
    """One row per rule: its count, and how many of those findings are fixable (counted per
    finding: `[*]` when all are, `[ ]` when none is, and `(1 of 2 fixable)` in between)."""
    counts = Counter(d.code for d in diagnostics)
    fixable = Counter(d.code for d in diagnostics if d.is_fixable(unsafe))
    rows = []
    for code, count in sorted(counts.items(), key=lambda kv: (-kv[1], kv[0])):
        name = next((d.name for d in diagnostics if d.code == code), "")
        rows.append((count, code, fixable[code], name))
    if fmt == "json":
        import json

        click.echo(json.dumps(
            [{"code": c, "name": n, "count": k, "fixable": f == k, "fixable_count": f} for k, c, f, n in rows],
            indent=2,
        ), err=err)
        return
    width = max((len(str(r[0])) for r in rows), default=1)
    for count, code, n_fixable, name in rows:
        mark = "[*]" if n_fixable else "[ ]"
        some = f" ({n_fixable} of {count} fixable)" if 0 < n_fixable < count else ""
        click.echo(f"{count:>{width}}\t{code}\t{mark} {name}{some}", err=err)


def _print_summary(diagnostics: List[Diagnostic], fix: bool, fixed: int, unsafe: bool, err: bool = False,
                   linted: int = 1) -> None:
    remaining = len(diagnostics)
    fixable = sum(1 for d in diagnostics if d.is_fixable(unsafe))
    if not linted:
        click.echo("Nothing was linted: no Python file or notebook found.", err=err)
    elif fix:
        if fixed or remaining:
            click.echo(f"Found {_plural(fixed + remaining, 'problem')} ({fixed} fixed, {remaining} remaining).", err=err)
        else:
            click.echo("All checks passed!", err=err)
    elif remaining:
        extra = f" ({fixable} fixable with --fix)" if fixable else ""
        click.echo(f"Found {_plural(remaining, 'problem')}{extra}.", err=err)
    else:
        click.echo("All checks passed!", err=err)
    _print_unsafe_hint(diagnostics, unsafe, err=err)


def _print_unsafe_hint(diagnostics: List[Diagnostic], unsafe: bool, err: bool = False) -> None:
    hidden = sum(1 for d in diagnostics if d.fix is not None and not d.is_fixable(unsafe))
    if hidden:
        click.echo(
            f"{hidden} more {'fix' if hidden == 1 else 'fixes'} available with --fix --unsafe-fixes "
            "(they change values or statement order: review them).",
            err=err,
        )


@cli.command("rule", short_help="Print the page of rule CODE (or of every rule).")
@click.argument("code", required=False)
@click.option("--all", "every", is_flag=True, help="Every rule's page.")
@click.option("--output-format", type=click.Choice(["text", "json"]), default="text", show_default=True)
def rule_command(code: Optional[str], every: bool, output_format: str) -> None:
    """Print the page of rule CODE (e.g. NAN101), or with --all of every rule."""
    from .rules.pages import render_page

    if every == (code is not None):
        raise click.UsageError("give a rule CODE or --all")
    if every:
        rules = all_rules()
    else:
        try:
            rules = [get_rule(code.upper())]
        except KeyError:
            raise ConfigError(f"unknown rule code '{code}' (see `nanlint rules`)")
    if output_format == "json":
        import json

        items = [_rule_json(r, render_page(r)) for r in rules]
        click.echo(json.dumps(items if every else items[0], indent=2))
        return
    click.echo("\n".join(render_page(r) for r in rules), nl=False)


def _rule_json(rule, page: Optional[str] = None) -> dict:
    from .rules.pages import rule_url

    item = {
        "code": rule.code,
        "name": rule.name,
        "kind": rule.kind,
        "claim": rule.claim(),
        "summary": rule.summary or rule.message,
        "message": rule.message,
        "fix": rule.fix_applicability,
        "default": rule.default_enabled,
        "url": rule_url(rule.code),
    }
    if page is not None:
        item["explanation"] = page
    return item


@cli.command("rules")
@click.option("--output-format", type=click.Choice(["text", "json"]), default="text", show_default=True)
def rules_command(output_format: str) -> None:
    """List every rule: code, name, kind (what a finding claims), fix, on by default."""
    rules = all_rules()
    if output_format == "json":
        import json

        click.echo(json.dumps([_rule_json(r) for r in rules], indent=2))
        return
    width = max(len(r.name) for r in rules)
    click.echo(f"{'code':<7} {'name':<{width}}  {'kind':<6}  {'fix':<6}  default")
    for r in rules:
        click.echo(
            f"{r.code:<7} {r.name:<{width}}  {r.kind:<6}  {(r.fix_applicability or '-'):<6}  "
            f"{'on' if r.default_enabled else 'off'}"
        )


cli.add_command(verify_command)


@cli.command("server")
def server_command() -> None:
    """Run the language server (LSP over stdio) for editors; needs nanlint[server]."""
    from .server import INSTALL_HINT

    try:
        from .server.lsp import start
    except ImportError as exc:
        raise ConfigError(f"{INSTALL_HINT} ({exc})")
    start()


def main(argv: Optional[Sequence[str]] = None) -> None:
    try:
        cli.main(args=list(argv) if argv is not None else None, prog_name="nanlint", standalone_mode=False)
    except ConfigError as exc:
        click.echo(f"nanlint: error: {exc}", err=True)
        sys.exit(2)
    except click.exceptions.UsageError as exc:
        click.echo(f"nanlint: error: {exc.format_message()}", err=True)
        sys.exit(2)
    except click.exceptions.Abort:
        click.echo("nanlint: aborted", err=True)
        sys.exit(2)
    except click.exceptions.Exit as exc:
        sys.exit(exc.exit_code)
    except BrokenPipeError:
        sys.exit(1)
    sys.exit(0)


if __name__ == "__main__":
    main()
