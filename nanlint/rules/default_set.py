"""Which rules are on by default, and the measurements that decide it.

A finding is judged by the claim of its rule's kind (rules/README.md). A rule is on by default
when, on code it was not tuned on (the test halves of the PyPI corpus and of the research
repositories, pooled: benchmarks/precision/), its findings' precision by claim is at least
0.90 over at least 20 judged findings; a rule with fewer judged findings is on when every one
of them is correct and it was on before findings came to be judged by claim, or its kind's
claim was what demoted it (NAN306 to NAN308). The hazards the project exists for are on
whatever the figures say (DEVELOPERS.md): a sigmoid written by hand, the log of a softmax, a
clip after `optimizer.step()`, float16 cross-entropy.

`UNTUNED` holds the figures (`benchmarks/precision/pooled.py --markdown`, the run named in
`MEASURED_AT`); the rule pages state them, and a test checks that every rule's
`default_enabled` is what this policy gives.
"""

from __future__ import annotations

from typing import Dict, NamedTuple, Optional

# The run the figures come from (benchmarks/precision/README.md says how to repeat it).
MEASURED_AT = "pooled.py --pypi s17a --repos s17a (issue 37), with issue 38's i38 rows"

BAR = 0.90
ENOUGH = 20

# The hazards the project exists for (the seeds' and DEVELOPERS.md's): on by default whatever
# their figures. A value rule among them reports its manifest findings by default.
MISSION = {
    "NAN101": "a sigmoid written by hand",
    "NAN102": "the log of a softmax",
    "NAN103": "the log of a sigmoid",
    "NAN201": "the log of a probability without an epsilon",
    "NAN301": "a binary cross-entropy written by hand",
    "NAN303": "float16 cross-entropy outside autocast",
    "NAN304": "cross-entropy under autocast without an upcast",
    "NAN401": "a gradient clipped after `optimizer.step()`",
}

# Form rules too rare in the corpora to reach ENOUGH findings, put on by a decision recorded in
# an issue (the rewrite is exact and free, and the false alarms found were fixed at the cause).
DECIDED = {
    "NAN107": "too rare to measure (a few findings per corpus); issue 37 put it on: the rewrite "
              "is exact and free, and the max-shift it missed in place (`x -= m`) is now seen",
}

# On before findings were judged by their rule's claim (so "stays on" applies), or demoted
# only because the old standard counted no wrong-but-finite loss as a hazard.
WAS_ON = {"NAN116", "NAN119", "NAN121", "NAN301", "NAN303", "NAN305", "NAN401", "NAN403", "NAN404",
          "NAN306", "NAN307", "NAN308"}


class Figures(NamedTuple):
    """Judged findings by claim: correct of judged, on the test half (untuned) and the tune
    half."""

    test_correct: int
    test_judged: int
    tune_correct: int
    tune_judged: int


# Rules with no finding on either half are absent (0 of 0).
UNTUNED: Dict[str, Figures] = {
    "NAN101": Figures(4, 6, 6, 8),
    "NAN102": Figures(33, 41, 21, 22),  # issue 37: pooled.py --pypi s17a --repos s17a
    "NAN103": Figures(19, 19, 25, 25),  # s17a
    "NAN104": Figures(127, 129, 10, 10),  # s17a
    "NAN105": Figures(39, 72, 39, 49),
    "NAN106": Figures(69, 75, 74, 75),  # issue 38: pooled.py --pypi i38 --repos i38
    "NAN107": Figures(1, 1, 1, 1),  # s17a
    "NAN108": Figures(2, 4, 4, 4),
    "NAN109": Figures(23, 55, 32, 62),  # issue 38
    "NAN110": Figures(0, 2, 0, 2),  # s17a, manifest
    "NAN113": Figures(3, 18, 3, 22),  # s17a, manifest
    "NAN116": Figures(7, 14, 8, 8),  # issue 38
    "NAN117": Figures(1, 1, 0, 0),
    "NAN118": Figures(1, 1, 0, 1),
    "NAN121": Figures(3, 4, 6, 10),  # n121 (after the conditional epsilon and the uniform prior)
    "NAN122": Figures(1, 24, 0, 10),  # s17a, manifest
    "NAN124": Figures(2, 4, 1, 2),  # issue 38
    "NAN201": Figures(7, 11, 1, 5),  # s17a, manifest (every finding of it is)
    "NAN202": Figures(1, 5, 0, 4),  # s17a, manifest
    "NAN203": Figures(0, 2, 3, 4),  # s17a, manifest
    "NAN301": Figures(2, 3, 3, 3),
    "NAN302": Figures(19, 22, 72, 73),  # issue 38
    "NAN304": Figures(28, 30, 11, 14),  # s17a
    "NAN305": Figures(0, 0, 0, 1),
    "NAN308": Figures(0, 0, 7, 7),
    "NAN402": Figures(1, 2, 4, 4),
    "NAN404": Figures(1, 1, 0, 0),
}

# A value rule's latent findings (no evidence named; reported only with `--latent`), judged
# apart: they are not in the default set's figure, and not what its decision reads. Rules
# with no entry here had none judged. (s17a, both halves.)
LATENT: Dict[str, Figures] = {
    "NAN110": Figures(0, 28, 0, 11),
    "NAN111": Figures(0, 4, 0, 1),
    "NAN112": Figures(3, 10, 2, 7),
    "NAN113": Figures(0, 26, 0, 14),
    "NAN114": Figures(0, 4, 0, 3),
    "NAN115": Figures(0, 2, 1, 5),
    "NAN120": Figures(0, 2, 0, 3),
    "NAN125": Figures(0, 2, 0, 0),
    "NAN126": Figures(0, 0, 1, 1),
    "NAN204": Figures(0, 4, 0, 11),
    "NAN205": Figures(0, 6, 0, 7),
}


def precision(correct: int, judged: int) -> Optional[float]:
    return correct / judged if judged else None


def decision(code: str, kind: str) -> "tuple[bool, str]":
    """(on by default, why) for rule `code` of `kind`, from its untuned figures. A value rule
    needs the bar over enough findings (issue 30: value rules stay off unless they reach it)."""
    f = UNTUNED.get(code, Figures(0, 0, 0, 0))
    p = precision(f.test_correct, f.test_judged)
    if kind == "file":
        return True, "the engine's own report of a file it could not lint"
    if code in MISSION:
        return True, f"a hazard the project exists for ({MISSION[code]}), on whatever its figures"
    if f.test_judged >= ENOUGH:
        if p >= BAR:
            return True, f"at least {BAR:.2f} over at least {ENOUGH} findings"
        return False, f"{p:.2f}, below {BAR:.2f}"
    if kind == "value":
        return False, f"a value rule needs at least {BAR:.2f} over at least {ENOUGH} findings"
    if f.test_correct == f.test_judged and code in WAS_ON:
        if f.test_judged == 0:
            return True, "it was on before, and nothing on the test halves to judge says otherwise"
        return True, f"fewer than {ENOUGH} findings, every one correct, and it was on before"
    if code in DECIDED:
        return True, DECIDED[code]
    if f.test_judged == 0:
        return False, "nothing on the test halves to judge"
    return False, f"fewer than {ENOUGH} findings, " + (
        "not every one correct" if f.test_correct < f.test_judged else "and it was off before")


def sentence(code: str, kind: str) -> str:
    """The figures and the decision, for the rule's page."""
    f = UNTUNED.get(code, Figures(0, 0, 0, 0))
    on, why = decision(code, kind)
    tune = f"; on the tune half {f.tune_correct} of {f.tune_judged}" if f.tune_judged else "; none on the tune half"
    where = ("on code the rules were not tuned on (the test halves of the PyPI corpus and of the "
             "research repositories, `benchmarks/precision/README.md`)")
    which = "manifest findings" if kind == "value" else "findings"
    if f.test_judged == 0:
        measured = f"It reported no {which} to judge {where}{tune}."
    else:
        measured = f"Judged by its claim {where}, {f.test_correct} of {f.test_judged} {which} were correct{tune}."
    latent = LATENT.get(code)
    if latent is not None:
        measured += (f" Its latent findings (reported only with `--latent`): {latent.test_correct} of "
                     f"{latent.test_judged} correct on the test half, {latent.tune_correct} of {latent.tune_judged} "
                     "on the tune half.")
    return f"{'On' if on else 'Off'} by default ({why}). {measured}"
