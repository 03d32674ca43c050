"""Which half of the real-bugs benchmark a repository belongs to.

The split is fixed by a hash of the repository name, decided before any result was looked
at: tune on the "tune" half, report both, never special-case a "test" line.
"""

from __future__ import annotations

import hashlib

TUNE = "tune"
TEST = "test"


def split_of(repo: str) -> str:
    """"tune" or "test" for an "owner/name" repository (case-insensitive)."""
    digest = hashlib.sha256(repo.lower().encode()).hexdigest()
    return TUNE if int(digest, 16) % 2 == 0 else TEST
