"""The `nanlint` command: `nanlint [check] PATHS`, `nanlint verify`, `nanlint rule CODE`, `nanlint rules`.

Exit codes (ruff's): 0 no finding remains, 1 findings remain, 2 usage/config/internal error.
"""

from __future__ import annotations

import sys
from collections import Counter
from typing import List, Optional, Sequence

import click

from . import __version__
from .config import ConfigError, apply_cli, load_settings
from .diagnostics import Diagnostic
from .cache import open_cache
from .progress import progress_for
from .runner import run
from .output import FORMATS, render
from .rules import all_rules, get_rule
from .verify.command import verify_command  # imports no torch until `verify` runs


class _DefaultToCheck(click.Group):
    """`nanlint src/` means `nanlint check src/`, as `ruff src/` once meant `ruff check`."""

    def parse_args(self, ctx: click.Context, args: List[str]) -> List[str]:
        if not args or (args[0] not in self.commands and args[0] not in ("--help", "-h", "--version")):
            args = ["check"] + list(args)
        return super().parse_args(ctx, args)


@click.group(cls=_DefaultToCheck, context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(__version__, "--version", prog_name="nanlint", message="%(prog)s %(version)s")
def cli() -> None:
    """Find numerically unsafe PyTorch code (NaN/Inf hazards) and fix it."""


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
@click.option("--config", "config_path", metavar="PATH", help="Read settings from this TOML file instead of the nearest pyproject.toml.")
@click.option("--jobs", "-j", type=click.IntRange(min=0), metavar="N", help="Lint in N worker processes (default: the config's `jobs`, else one per usable CPU; 1: no workers; 0: one per usable CPU).")
@click.option("--no-cache", is_flag=True, help="Neither read nor write the result cache.")
@click.option("--cache-dir", metavar="PATH", help="Keep the result cache here (default: $NANLINT_CACHE_DIR, the config's `cache-dir`, else .nanlint_cache at the project root).")
@click.option("--quiet", "-q", is_flag=True, help="Show no progress bar.")
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
    config_path: Optional[str],
    jobs: Optional[int],
    no_cache: bool,
    cache_dir: Optional[str],
    quiet: bool,
) -> None:
    """Lint PATHS (default: the current directory)."""
    settings = load_settings(config_path)
    settings = apply_cli(settings, select, extend_select, ignore)
    settings.force_exclude = settings.force_exclude or force_exclude
    result = run(
        paths, settings, fix=fix, unsafe_fixes=unsafe_fixes, diff=diff,
        jobs=jobs or None,
        cache=None if no_cache else open_cache(settings, cache_dir),
        progress=progress_for(quiet),
    )
    diagnostics, internal_errors, fixed = result.diagnostics, result.errors, result.fixed
    for message in result.warnings:
        click.echo(f"nanlint: warning: {message}", err=True)
    for message in internal_errors:
        click.echo(f"nanlint: error: {message}", err=True)

    if diff:
        sys.stdout.write("".join(result.diffs))
        if fixed:
            click.echo(f"Would fix {_plural(fixed, 'problem')}.", err=True)
        else:
            click.echo("No fixes to apply.", err=True)
        sys.exit(2 if internal_errors else (1 if fixed and not exit_zero else 0))

    if statistics:
        _print_statistics(diagnostics, output_format, unsafe_fixes)
    else:
        sys.stdout.write(render(output_format, diagnostics, unsafe_fixes=unsafe_fixes))
    if output_format == "text":
        _print_summary(diagnostics, fix, fixed, unsafe_fixes)
    if internal_errors:
        sys.exit(2)
    sys.exit(1 if diagnostics and not exit_zero else 0)


def _print_statistics(diagnostics: List[Diagnostic], fmt: str, unsafe: bool) -> None:
    counts = Counter(d.code for d in diagnostics)
    fixable = Counter(d.code for d in diagnostics if d.is_fixable(unsafe))
    rows = []
    for code, count in sorted(counts.items(), key=lambda kv: (-kv[1], kv[0])):
        name = next((d.name for d in diagnostics if d.code == code), "")
        rows.append((count, code, fixable[code] == count, name))
    if fmt == "json":
        import json

        click.echo(json.dumps(
            [{"code": c, "name": n, "count": k, "fixable": f} for k, c, f, n in rows], indent=2
        ))
        return
    width = max((len(str(r[0])) for r in rows), default=1)
    for count, code, all_fixable, name in rows:
        click.echo(f"{count:>{width}}\t{code}\t{'[*]' if all_fixable else '[ ]'} {name}")


def _print_summary(diagnostics: List[Diagnostic], fix: bool, fixed: int, unsafe: bool) -> None:
    remaining = len(diagnostics)
    fixable = sum(1 for d in diagnostics if d.is_fixable(unsafe))
    hidden = sum(1 for d in diagnostics if d.fix is not None and not d.is_fixable(unsafe))
    if fix:
        if fixed or remaining:
            click.echo(f"Found {_plural(fixed + remaining, 'problem')} ({fixed} fixed, {remaining} remaining).")
        else:
            click.echo("All checks passed!")
    elif remaining:
        extra = f" ({fixable} fixable with --fix)" if fixable else ""
        click.echo(f"Found {_plural(remaining, 'problem')}{extra}.")
    else:
        click.echo("All checks passed!")
    if hidden:
        click.echo(
            f"{hidden} more {'fix' if hidden == 1 else 'fixes'} available with --fix --unsafe-fixes "
            "(they change values or statement order: review them)."
        )


@cli.command("rule", short_help="Print the page of rule CODE.")
@click.argument("code")
def rule_command(code: str) -> None:
    """Print the page of rule CODE (e.g. NAN101)."""
    from .pages import render_page

    try:
        rule = get_rule(code.upper())
    except KeyError:
        raise ConfigError(f"unknown rule code '{code}' (see `nanlint rules`)")
    click.echo(render_page(rule), nl=False)


@cli.command("rules")
def rules_command() -> None:
    """List every rule: code, name, fixable, on by default."""
    rules = all_rules()
    width = max(len(r.name) for r in rules)
    click.echo(f"{'code':<7} {'name':<{width}}  {'fix':<6}  default")
    for r in rules:
        click.echo(
            f"{r.code:<7} {r.name:<{width}}  {(r.fix_applicability or '-'):<6}  "
            f"{'on' if r.default_enabled else 'off'}"
        )


cli.add_command(verify_command)


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
