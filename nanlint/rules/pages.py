"""Rule pages (ruff's shape): rendered from the rule classes into rules/KIND/CODE.md (a folder
per rule kind: form, value, misuse, file) and shown by `nanlint rule CODE`; rules/README.md is
the catalog. A test keeps the files in sync.

"Where it fails (verified)" is the section the verifier measured on the rule's fixtures
(`python -m nanlint.verify.calibrate`), read from the package data nanlint/rules/verified/CODE.md
when it exists: this module only reads the file (it never imports torch)."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import List, Optional, Type

from .default_set import sentence
from . import Rule, all_rules, get_rule
from .base import KINDS

# Where each rule's page is published (the same text as rules/KIND/CODE.md and `nanlint rule
# CODE`): the catalog has a folder per rule kind (form, value, misuse, file).
RULES_URL = "https://github.com/nanlint/nanlint/blob/main/rules/{kind}/{code}.md"


def rule_kind(code: str) -> Optional[str]:
    """The kind of rule `code` (form, value, misuse, file), or None for a code no rule has."""
    try:
        return get_rule(code).kind
    except KeyError:
        return None


def rule_url(code: str) -> str:
    """The published page of rule `code`."""
    return RULES_URL.format(kind=rule_kind(code) or "file", code=code)


def _fix_line(rule: Type[Rule]) -> str:
    if rule.fix_applicability is None:
        return "Fix: none (the right change depends on intent; the page says what to do)."
    flag = "`--fix`" if rule.fix_applicability == "safe" else "`--fix --unsafe-fixes`"
    return f"Fix: {rule.fix_applicability}, applied with {flag}."


def verified_section(code: str) -> Optional[str]:
    """The calibrated section of rule `code` (package data), or None."""
    try:
        from importlib.resources import files
    except ImportError:  # Python < 3.9
        return None
    resource = files("nanlint.rules").joinpath("verified").joinpath(f"{code}.md")
    if not resource.is_file():
        return None
    return resource.read_text(encoding="utf-8")


def _untuned(rule: Type[Rule]) -> str:
    """The measured figures and the default decision (default_set.py), then the rule's own
    account of what its findings were."""
    if rule.kind == "file":
        return rule.untuned_precision
    return (sentence(rule.code, rule.kind) + "\n\n" + rule.untuned_precision.strip()).strip()


def _manifest(rule: Type[Rule]) -> str:
    """For a value rule: which findings carry evidence (reported by default) and which are
    latent (reported with `--latent`)."""
    if rule.kind != "value":
        return ""
    if not rule.manifest:
        return ("This rule names no evidence yet that the value reaches its singular point: every "
                "finding is latent, reported only with `--latent`.")
    return (f"A finding is manifest, and reported, when {rule.manifest.strip()} The message names "
            "the evidence and every output format carries it as located steps; a finding without "
            "it is latent, reported only with `--latent` and marked `(latent)`.")


# Sections of a page that hold measurements: the full page has them; the help a SARIF viewer
# shows beside each alert (brief) leaves them to the page it links to.
_FIGURES = ("Where it fails (measured)", "Where it fails (verified)", "Precision on code it was not tuned on")


def render_page(rule: Type[Rule], brief: bool = False) -> str:
    """The rule's page in Markdown; `brief`: without the sections of figures (their titles
    are listed, with the link to the full page)."""
    parts: List[str] = [f"# {rule.code} {rule.name}", ""]
    parts.append(f"{rule.summary or rule.message}")
    parts.append("")
    parts.append(
        f"Default: {'on' if rule.default_enabled else 'off (enable with `--extend-select ' + rule.code + '`)'}. "
        + _fix_line(rule)
    )
    parts.append("")
    parts.append(f"Kind: {rule.kind}. A finding claims that {rule.claim()}.")
    if not brief:  # a SARIF viewer shows the message beside the help
        parts += ["", f"Message: {rule.message}."]
    if rule.fails_in:
        parts += ["", f"Fails in: {rule.fails_in}."]
    sections = [
        ("Why is this bad?", rule.why),
        ("Where it fails (measured)", rule.measured),
        ("Where it fails (verified)", verified_section(rule.code) or ""),
        ("Example", rule.example),
        ("Use instead", rule.use_instead),
        ("Fix safety", rule.fix_notes),
        ("Manifest and latent findings", _manifest(rule)),
        ("Precision on code it was not tuned on", _untuned(rule)),
    ]
    left_out = []
    for title, body in sections:
        if brief and title in _FIGURES:
            left_out += [title] if body.strip() else []
            continue
        if body.strip():
            parts += ["", f"## {title}", "", body.strip()]
    if left_out:
        parts += ["", f"`nanlint rule {rule.code}` prints the full page, which also has: "
                  + "; ".join(t.lower() for t in left_out) + "."]
    if rule.references:
        parts += ["", "## References", ""]
        parts += [f"- {ref}" for ref in rule.references]
    return "\n".join(parts) + "\n"


_KIND_TITLES = {
    "form": "Form: unstable spellings of a stable PyTorch function",
    "value": "Value: singular points the value can reach",
    "misuse": "Misuse: wrong order or API use on a path that runs",
    "file": "File: files nanlint could not lint",
}


def page_path(rule: Type[Rule]) -> str:
    """The page's path under rules/: a folder per kind."""
    return f"{rule.kind}/{rule.code}.md"


def render_catalog() -> str:
    lines = [
        "# nanlint rules",
        "",
        "Generated from the rule classes (`python -m nanlint.rules.pages`); `nanlint rule CODE` prints a page.",
        "",
        "Every rule is of one kind, and its findings are judged (and verified) by that kind's claim.",
    ]
    for kind, title in _KIND_TITLES.items():
        rules = [r for r in all_rules() if r.kind == kind]
        lines += [
            "",
            f"## {title}",
            "",
            f"A finding claims that {KINDS[kind]}.",
            "",
            "| code | name | what fails | fails in | fix | exact | on by default |",
            "|---|---|---|---|---|---|---|",
        ]
        for rule in rules:
            fix = rule.fix_applicability or "none"
            exact = {"safe": "yes", "unsafe": "no"}.get(rule.fix_applicability or "", "—")
            lines.append(
                f"| [{rule.code}]({page_path(rule)}) | {rule.name} | {rule.summary or rule.message} "
                f"| {rule.fails_in or '—'} | {fix} | {exact} | {'yes' if rule.default_enabled else 'no'} |"
            )
    return "\n".join(lines) + "\n"


def expected_files() -> dict:
    """Every page the rule classes render, by its path under rules/."""
    files = {page_path(rule): render_page(rule) for rule in all_rules()}
    files["README.md"] = render_catalog()
    return files


def _present(directory: Path) -> dict:
    if not directory.is_dir():
        return {}
    return {p.relative_to(directory).as_posix(): p.read_text(encoding="utf-8") for p in directory.rglob("*.md")}


def write_pages(directory: Path) -> None:
    """Write every page and remove the pages no rule renders (a rule that changed kind)."""
    want = expected_files()
    for name in set(_present(directory)) - set(want):
        (directory / name).unlink()
    for name, text in want.items():
        target = directory / name
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_text(text, encoding="utf-8")


def stale_pages(directory: Path) -> List[str]:
    """Paths of the pages under `directory` that are missing, stale or not rendered by any rule."""
    want = expected_files()
    have = _present(directory)
    return sorted(name for name in set(want) | set(have) if want.get(name) != have.get(name))


def main(argv: List[str]) -> int:
    usage = "usage: python -m nanlint.rules.pages [--check] [DIRECTORY]   (DIRECTORY defaults to rules)"
    check = "--check" in argv
    rest = [arg for arg in argv if arg != "--check"]
    if len(rest) > 1 or any(arg.startswith("-") for arg in rest):
        print(usage, file=sys.stderr)
        return 2
    directory = Path(rest[0] if rest else "rules")
    if check:
        stale = stale_pages(directory)
        for name in stale:
            print(f"{directory / name}: stale (run `python -m nanlint.rules.pages`)")
        return 1 if stale else 0
    write_pages(directory)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
