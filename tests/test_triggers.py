"""Rule triggers searched from their literal starts answer exactly what `re.search` does."""

from __future__ import annotations

import re

import pytest

from nanlint.rules import all_rules
from nanlint.core.triggers import Trigger, firing

# Texts around each trigger's edges: word boundaries on either side, the start and end of
# the text, spaces and newlines before a parenthesis, near misses and Unicode letters.
TEXTS = [
    "", "exp", "exp(", "torch.exp(x)", "xexp(x)", "expm1(x)", "np.exp\n(x)", "é" + "exp(1)",
    "log", "alog(x)", "log(", "log10 (p)", "log2(p)", "log1p(-p)", "logger.info()", "_log(x)",
    "x.log()", "\tlog\t(", "log_softmax(x)", "logvar.exp()", "log_std", "LogVar", "catalog",
    "mean(", "x.mean ()", "xmean(", "var_mean(x)", "std(x)", "prod (x)", "product(x)",
    "torch.where(m, a, b)", "nowhere(", "where", "masked_fill_(m, -1e9)", "1e-8", "1E-12",
    "1e-7", "3e-08", "x.acos()", "arccos(x)", "asin", "sinc(x)", "atan2(y, x)", "arctan(x)",
    "half()", "behalf", "float16", "HalfTensor", "autocast(", "Adam(", "RMSprop", "Adagrad",
    "sqrt(x)", "x ** 0.5", "x**.5", "pow( 0.5)", "F.cross_entropy(", "nn.NLLLoss()",
    "binary_cross_entropy", "BCELoss", "kl_div(", "KLDivLoss", "clip_grad_norm_(", "scaler.scale(",
    "scaler . scale (loss)", "count_nonzero(", "sum", "softmax(", "sigmoid", "expit(", "norm(",
    "# exp in a comment\nlog(x)", "'''exp'''", "def exp(): pass\n", "exp" * 3, "log" * 4 + "(",
]


@pytest.mark.parametrize("pattern", sorted({r.triggers for r in all_rules() if r.triggers}))
def test_every_rule_trigger_answers_as_re_search(pattern: str) -> None:
    compiled = Trigger(pattern)
    regex = re.compile(pattern)
    for text in TEXTS + [" ".join(TEXTS), "\n".join(TEXTS)]:
        assert compiled.search(text) == (regex.search(text) is not None), (pattern, text)


def test_a_word_trigger_is_searched_from_its_literal() -> None:
    assert Trigger(r"\bexp\b").starts == ("exp",)
    # `a(cos|rccos)` after the parser factors the branches: every full word is a start.
    assert set(Trigger(r"\b(acos|arccos|asin|arcsin)\b").starts) == {"acos", "arccos", "asin", "arcsin"}
    # A start that extends another is found where the shorter one is.
    assert Trigger(r"\b(?:var|std|var_mean|std_mean|mean)\s*\(").starts == ("std", "var", "mean")


@pytest.mark.parametrize("pattern", [r"(?i)log_?var", r"\d[eE]-8", r"\.\s*scale", r"a|\bbc", r"(?:x)?foo"])
def test_patterns_without_long_literal_starts_use_a_plain_search(pattern: str) -> None:
    compiled = Trigger(pattern)
    assert compiled.starts is None
    assert compiled.search("LOGVAR 1e-8 s.scale bc foo") == (re.search(pattern, "LOGVAR 1e-8 s.scale bc foo") is not None)


def test_firing_keeps_the_rules_whose_trigger_matches_in_order() -> None:
    rules = list(all_rules())
    source = "import torch\ny = torch.log(torch.softmax(x, -1))\n"
    assert firing(rules, source) == [r for r in rules if r.may_fire(source)]
    assert {r.code for r in firing(rules, source)} >= {"NAN102", "NAN201"}
    assert not any(r.code in ("NAN001", "NAN002") for r in firing(rules, source))
