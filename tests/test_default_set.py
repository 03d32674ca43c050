"""The default set is what the measurements decide (nanlint/rules/default_set.py), and it finds the
hazards the project exists for in float32 code written fresh, with no flags."""

from __future__ import annotations

from pathlib import Path

import pytest

from nanlint.rules import default_set
from nanlint.run.config import Settings, select_rules
from nanlint.lint.engine import lint_source
from nanlint.lint.fixes import fix_source
from nanlint.rules import all_rules, get_rule

ROOT = Path(__file__).resolve().parent.parent


@pytest.mark.parametrize("rule", all_rules(), ids=lambda r: r.code)
def test_default_enabled_is_what_the_figures_decide(rule):
    on, why = default_set.decision(rule.code, rule.kind)
    assert rule.default_enabled == on, f"{rule.code}: {why}"


def test_the_policy_reads_the_bar_and_the_count():
    figures = default_set.UNTUNED
    # Enough findings over the bar: on; enough below it: off.
    assert default_set.decision("NAN104", "form")[0] and figures["NAN104"].test_judged >= default_set.ENOUGH
    assert not default_set.decision("NAN105", "form")[0]
    # A value rule needs the bar over enough findings, whatever it was before.
    assert not default_set.decision("NAN119", "value")[0]
    # The project's own hazards are on whatever their figures say.
    assert all(default_set.decision(code, get_rule(code).kind)[0] for code in default_set.MISSION)
    # The default set as a whole clears the bar on the test halves over at least 100 findings.
    on = [c for c, f in figures.items() if get_rule(c).default_enabled]
    correct = sum(figures[c].test_correct for c in on)
    judged = sum(figures[c].test_judged for c in on)
    assert judged >= 100 and correct / judged >= default_set.BAR


# A float32 training script written for this test: every hazard the defaults must find.
FRESH = '''\
import torch
import torch.nn as nn
import torch.nn.functional as F


def binarize(features, prob_head, thresh_head, k=50):
    # DBNet's differentiable binarization: two sigmoid maps and a gain of 50.
    x, y = torch.sigmoid(prob_head(features)), torch.sigmoid(thresh_head(features))
    return torch.reciprocal(1 + torch.exp(-k * (x - y)))


def gate(h):
    return 1 / (1 + torch.exp(-h))


def losses(logits, scores, raw_scale, target):
    log_probs = torch.log(torch.softmax(logits, dim=-1))
    positive = torch.log(torch.sigmoid(scores))
    negative = torch.log(1 - torch.sigmoid(scores))
    scale = torch.log(1 + torch.exp(raw_scale))
    return -log_probs.gather(1, target[:, None]).mean() - positive.mean() - negative.mean() + scale


def half_loss(model, x, y):
    logits = model(x).half()
    return F.cross_entropy(logits, y)


def train(model, optimizer, loader):
    for x, y in loader:
        loss = F.cross_entropy(model(x), y)
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
'''


def _defaults():
    return select_rules(Settings())  # what `nanlint src/` runs with no flags and no config


def test_fresh_float32_script_shows_every_mission_hazard_by_default():
    found = {(d.start.row, d.code) for d in lint_source("train.py", FRESH, _defaults()).diagnostics}
    assert found == {
        (9, "NAN101"),  # the DBNet step with k = 50, in float32
        (13, "NAN101"),  # a hand sigmoid
        (17, "NAN102"),  # log of a softmax
        (18, "NAN103"),  # log of a sigmoid, float32
        (19, "NAN103"),  # log of 1 - sigmoid
        (20, "NAN104"),  # a hand softplus
        (26, "NAN303"),  # float16 cross-entropy outside autocast
        (35, "NAN401"),  # clip after step
    }


def test_the_dbnet_step_is_fixed_to_torch_sigmoid_by_default():
    outcome = fix_source("train.py", FRESH, _defaults(), unsafe=False)
    assert "return torch.sigmoid(k * (x - y))" in outcome.source
    assert "torch.nn.functional.log_softmax(logits, dim=-1)" in outcome.source or \
        "torch.log_softmax(logits, dim=-1)" in outcome.source


def test_the_example_shows_all_six_of_its_hazards_by_default():
    source = (ROOT / "examples" / "train_step.py").read_text(encoding="utf-8")
    found = lint_source("examples/train_step.py", source, _defaults()).diagnostics
    assert sorted(d.code for d in found) == ["NAN101", "NAN102", "NAN104", "NAN107", "NAN201", "NAN401"]
    # The label entropy's zero is manifest: the ratio of counts, with its located evidence.
    (entropy,) = [d for d in found if d.code == "NAN201"]
    assert not entropy.latent and [s.row for s in entropy.evidence] == [46]
    assert "bincount" in entropy.evidence[0].note


# Written fresh for this test: the log of a softmax or a sigmoid that a selection, a local,
# a module attribute or `forward` stands between, as REINFORCE, hand NLLs and hand BCEs do.
SELECTED = '''\
import torch
import torch.nn as nn
import torch.nn.functional as F


class Policy(nn.Module):
    def __init__(self, n_obs, n_act):
        super().__init__()
        self.fc = nn.Linear(n_obs, n_act)

    def forward(self, obs):
        return F.softmax(self.fc(obs), dim=-1)


class Critic(nn.Module):
    def __init__(self, n_obs):
        super().__init__()
        self.fc = nn.Linear(n_obs, 1)
        self.act = nn.Sigmoid()

    def forward(self, obs):
        return self.act(self.fc(obs)).squeeze(-1)


def nll_of_index(scores, idx):
    return -torch.log(F.softmax(scores, -1)[idx])


def nll_of_gather(scores, target):
    probs = torch.softmax(scores, dim=1)
    return -torch.log(probs.gather(1, target[:, None]).squeeze(1)).mean()


def reinforce(policy: Policy, obs, labels, returns):
    pi = policy(obs)
    pi_a = pi.gather(1, labels)
    return -(torch.log(pi_a) * returns).mean()


def bce_on_a_squeezed_sigmoid(lin, x, y):
    q = torch.sigmoid(lin(x)).squeeze(-1)
    return -(y * torch.log(q) + (1 - y) * torch.log(1 - q)).mean()


def bce_on_forward(critic: Critic, obs, y):
    p = critic(obs)
    return -(y * torch.log(p) + (1 - y) * torch.log(1 - p)).mean()


def entropy_bonus(policy: Policy, obs):
    pi = policy(obs)
    return -(pi * torch.log(pi)).sum(-1).mean()
'''


def test_a_selected_or_distant_softmax_or_sigmoid_keeps_its_form_by_default():
    found = lint_source("rl.py", SELECTED, _defaults()).diagnostics
    assert sorted((d.start.row, d.code) for d in found) == [
        (26, "NAN102"),  # F.softmax(...)[idx]: fixed in place
        (31, "NAN102"),  # a local softmax, gathered and squeezed
        (37, "NAN102"),  # forward's softmax, gathered
        (42, "NAN301"),  # a hand BCE on a squeezed sigmoid: the whole loss, both terms
        (47, "NAN301"),  # a hand BCE on forward's sigmoid module, squeezed
        (52, "NAN102"),  # an entropy of forward's softmax
    ]
    by_row = {d.start.row: d for d in found}
    assert "`Policy.forward` via `policy(...)`" in by_row[37].message and by_row[37].fix is None
    assert "`self.act` output" in by_row[47].message and "`Critic.forward`" in by_row[47].message
    fixed = fix_source("rl.py", SELECTED, _defaults(), unsafe=False).source
    assert "return -F.log_softmax(scores, -1)[idx]" in fixed
