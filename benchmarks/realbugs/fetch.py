"""Fetch every file the real-bugs manifests name into a local cache and check the hashes.

    python benchmarks/realbugs/fetch.py                      # from raw.githubusercontent.com
    python benchmarks/realbugs/fetch.py --mirrors /work/.mirror   # from local bare git mirrors

Files land in benchmarks/realbugs/.cache/<owner>+<name>/<commit>/<path> (git-ignored).
Every labelled line is checked against its sha256; a mismatch or a file that could not be
had is reported, and the exit status is 1 if there was any.
"""

from __future__ import annotations

import argparse
import subprocess
import sys
import urllib.error
import urllib.request
from collections import defaultdict
from pathlib import Path
from typing import Dict, List, Optional, Tuple

import manifest
from manifest import DEFAULT_CACHE, Entry, ManifestError

RAW_URL = "https://raw.githubusercontent.com/{repo}/{commit}/{path}"


def mirror_dir(mirrors: Path, repo: str) -> Optional[Path]:
    """The bare git directory for `repo` under `mirrors`: the layout the fetch tool uses
    (<owner>+<name>/repo), <owner>+<name>, <owner>/<name>(.git) or <name>(.git)."""
    owner, name = repo.split("/", 1)
    candidates = [
        mirrors / f"{owner}+{name}" / "repo",
        mirrors / f"{owner}+{name}",
        mirrors / owner / f"{name}.git",
        mirrors / owner / name,
        mirrors / f"{name}.git",
        mirrors / name,
    ]
    for c in candidates:
        if (c / "HEAD").is_file() and (c / "objects").is_dir():
            return c
        if (c / ".git" / "HEAD").is_file():
            return c / ".git"
    # Directory names on disk may differ in case from the manifest's spelling.
    if mirrors.is_dir():
        want = f"{owner}+{name}".lower()
        for d in mirrors.iterdir():
            if d.name.lower() == want:
                for c in (d / "repo", d):
                    if (c / "HEAD").is_file():
                        return c
    return None


def from_mirror(git_dir: Path, commit: str, path: str) -> bytes:
    proc = subprocess.run(
        ["git", "--git-dir", str(git_dir), "show", f"{commit}:{path}"],
        capture_output=True,
    )
    if proc.returncode != 0:
        raise OSError(proc.stderr.decode(errors="replace").strip() or "git show failed")
    return proc.stdout


def from_github(repo: str, commit: str, path: str, timeout: float) -> bytes:
    url = RAW_URL.format(repo=repo, commit=commit, path=urllib.request.quote(path))
    try:
        with urllib.request.urlopen(url, timeout=timeout) as resp:
            return resp.read()
    except urllib.error.HTTPError as exc:
        raise OSError(f"{url}: HTTP {exc.code}") from None
    except (urllib.error.URLError, TimeoutError) as exc:
        raise OSError(f"{url}: {getattr(exc, 'reason', exc)}") from None


def main(argv: Optional[List[str]] = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("manifests", nargs="*", help="manifest files or folders (default: manifests/*.jsonl)")
    ap.add_argument("--cache", default=str(DEFAULT_CACHE), help="where fetched files go")
    ap.add_argument("--mirrors", help="folder of bare git mirrors to read instead of the network")
    ap.add_argument("--refetch", action="store_true", help="fetch files already in the cache again")
    ap.add_argument("--timeout", type=float, default=30.0, help="seconds per HTTPS request")
    args = ap.parse_args(argv)

    try:
        entries = manifest.load(args.manifests)
    except ManifestError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    cache = Path(args.cache)
    mirrors = Path(args.mirrors) if args.mirrors else None

    by_file: Dict[Tuple[str, str, str], List[Entry]] = defaultdict(list)
    for e in entries:
        by_file[(e.repo, e.commit, e.path)].append(e)

    fetched = cached = 0
    failures: List[str] = []
    mismatches: List[str] = []
    for (repo, commit, path), file_entries in sorted(by_file.items()):
        dest = manifest.cache_path(cache, repo, commit, path)
        if args.refetch or not dest.is_file():
            try:
                if mirrors is not None:
                    git_dir = mirror_dir(mirrors, repo)
                    if git_dir is None:
                        raise OSError(f"no mirror of {repo} under {mirrors}")
                    data = from_mirror(git_dir, commit, path)
                else:
                    data = from_github(repo, commit, path, args.timeout)
            except OSError as exc:
                failures.append(f"{repo}@{commit[:12]}:{path}: {exc}")
                continue
            dest.parent.mkdir(parents=True, exist_ok=True)
            tmp = dest.with_name(dest.name + ".part")
            tmp.write_bytes(data)
            tmp.replace(dest)
            fetched += 1
        else:
            cached += 1
        text = dest.read_bytes().decode("utf-8", errors="replace")
        for e in file_entries:
            problem = manifest.check_line(text, e)
            if problem:
                mismatches.append(f"{e.origin}: {repo}@{commit[:12]}:{path}: {problem}")

    print(
        f"{len(entries)} labelled lines in {len(by_file)} files: "
        f"{fetched} fetched, {cached} already cached, {len(failures)} not fetched, "
        f"{len(mismatches)} hash mismatches"
    )
    for f in failures:
        print(f"not fetched: {f}")
    for m in mismatches:
        print(f"mismatch: {m}")
    return 1 if failures or mismatches else 0


if __name__ == "__main__":
    sys.exit(main())
