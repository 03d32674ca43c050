"""`nanlint verify`: lint (or read findings), then run every probe.

Importing this module does not import torch: the command imports the verifier only when it
runs, and exits 2 with one line when torch is missing.

Exit codes: 0 nothing confirmed and no fix failed; 1 some finding confirmed or some fix
failed (with --exit-zero: 0); 2 usage, configuration or internal error, or torch missing.
A "possible" finding (a failure found only with inputs the analysis could not bound) and a
refused one ("not-verifiable", e.g. over the per-finding budget) do not change the code.
"""

from __future__ import annotations

import os
import sys
from typing import Optional, Sequence

import click

from . import INSTALL_HINT


@click.command("verify")
@click.argument("paths", nargs=-1, type=click.Path())  # with --from: where the report may quote source
@click.option("--from", "from_file", metavar="FINDINGS.json",
              help="Verify the findings in this file (the output of `nanlint check --output-format json`; - for stdin) "
                   "instead of linting; PATHS then only name where the report may quote source lines from.")
@click.option("--device", type=click.Choice(["auto", "cuda", "cpu"]), default="auto", show_default=True,
              help="Where to run: auto is CUDA when torch sees a GPU, else the CPU.")
@click.option("--select", metavar="CODES", help="Comma-separated codes or prefixes to verify (as in check). "
                                                 "With --from, every finding in the file is verified unless "
                                                 "--select, --extend-select or --ignore is given.")
@click.option("--extend-select", metavar="CODES", help="Codes or prefixes to add to the selection.")
@click.option("--ignore", metavar="CODES", help="Codes or prefixes to skip.")
@click.option("--output-format", type=click.Choice(["text", "json"]), default="text", show_default=True)
@click.option("--report", "report_path", metavar="FILE.html", type=click.Path(dir_okay=False),
              help="Also write a self-contained HTML report (plots need matplotlib: nanlint[report]).")
@click.option("--exit-zero", is_flag=True, help="Exit 0 even when findings are confirmed or fixes fail.")
@click.option("--config", "config_path", metavar="PATH", help="Read settings from this TOML file.")
def verify_command(
    paths: Sequence[str],
    from_file: Optional[str],
    device: str,
    select: Optional[str],
    extend_select: Optional[str],
    ignore: Optional[str],
    output_format: str,
    report_path: Optional[str],
    exit_zero: bool,
    config_path: Optional[str],
) -> None:
    """Verify findings at run time: the original fails, the fix holds.

    Lints PATHS (default: the current directory), or reads --from FINDINGS.json, and runs
    every finding's probe in float32, float16 and bfloat16, with and without autocast,
    forward and backward, against a float64 reference. Only the extracted expressions are
    evaluated (whitelisted torch operations); the linted code is never imported or run.
    """
    if report_path is not None:
        # Fail now, not after minutes of verifying, when the report cannot be written there.
        folder = os.path.dirname(os.path.abspath(report_path))
        if not os.path.isdir(folder):
            click.echo(f"nanlint: error: cannot write {report_path}: folder {folder} does not exist", err=True)
            sys.exit(2)
    try:
        import torch  # noqa: F401
    except ImportError:
        click.echo(f"nanlint: error: {INSTALL_HINT}", err=True)
        sys.exit(2)

    from ..run.config import apply_cli, load_settings
    from .findings import FindingsError, lint_findings, printable_line, read_findings, selected

    settings = apply_cli(load_settings(config_path), select, extend_select, ignore)
    errors = []
    # The report quotes source lines only from files under the paths the user linted (with
    # --from, the PATHS given beside it); a findings file alone quotes no file.
    source_roots = list(paths) if paths else ([] if from_file is not None else ["."])
    if from_file is not None:
        try:
            diagnostics = read_findings(from_file)
        except FindingsError as exc:
            click.echo(f"nanlint: error: {printable_line(str(exc))}", err=True)
            sys.exit(2)
    else:
        linted = lint_findings(paths, settings)
        diagnostics = linted.diagnostics
        errors.extend(linted.errors)
    # A findings file holds what `check` was asked for (`--select ALL` included): verify all
    # of it, unless this command line narrows it; the config's selection made the file.
    if from_file is None or (select, extend_select, ignore) != (None, None, None):
        chosen = selected(diagnostics, settings)
        if from_file is not None and len(chosen) < len(diagnostics):
            left = len(diagnostics) - len(chosen)
            click.echo(f"nanlint: {left} finding{'s' if left != 1 else ''} in {from_file} not verified: "
                       "their rules are not selected", err=True)
        diagnostics = chosen

    from .contexts import resolve_device
    from .report_text import render_json, render_text
    from .verdict import CONFIRMED, FIX_FAILED
    from .verifier import Progress, verify_all

    try:
        where = resolve_device(device)
    except RuntimeError as exc:
        click.echo(f"nanlint: error: {exc}", err=True)
        sys.exit(2)
    probed = [d for d in diagnostics if d.probe is not None]
    progress = Progress(len(probed))
    outcome = verify_all(diagnostics, where, want_sweep=report_path is not None, progress=progress.step)
    outcome.errors[:0] = errors
    outcome.source_roots = source_roots
    for message in outcome.errors:
        click.echo(f"nanlint: error: {printable_line(message)}", err=True)
    if output_format == "json":
        sys.stdout.write(render_json(outcome))
    else:
        sys.stdout.write(render_text(outcome))
    if report_path is not None:
        from .report_html import render_html

        try:
            with open(report_path, "w", encoding="utf-8") as fh:
                fh.write(render_html(outcome))
        except OSError as exc:
            click.echo(f"nanlint: error: cannot write {report_path}: {exc.strerror or exc}", err=True)
            sys.exit(2)
        click.echo(f"Report written to {report_path}", err=True)
    if outcome.errors:
        sys.exit(2)
    bad = any(r.verification.verdict in (CONFIRMED, FIX_FAILED) for r in outcome.results)
    sys.exit(1 if bad and not exit_zero else 0)
