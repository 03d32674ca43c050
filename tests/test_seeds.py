"""The four NaN write-ups the project was started from (the seeds, ../shared/seeds/), in the
shapes their code takes, written for this test: `nanlint` with no flags and no config must
report each hazard where the code is written so, and say nothing once it is fixed the way the
rule pages say."""

from __future__ import annotations

from typing import List, Tuple

import pytest

from nanlint.run.config import Settings, select_rules
from nanlint.lint.engine import lint_source


def _found(source: str) -> List[Tuple[int, str]]:
    return sorted((d.start.row, d.code) for d in lint_source("train.py", source, select_rules(Settings())).diagnostics)


# Seed 000: DBNet's differentiable binarization, a step function with a gain of 50.
STEP = '''\
import torch
import torch.nn as nn


class BinarizeHead(nn.Module):
    def __init__(self, k=50):
        super().__init__()
        self.k = k
        self.prob = nn.Conv2d(64, 1, 1)
        self.thresh = nn.Conv2d(64, 1, 1)

    def step(self, x, y):
        return torch.reciprocal(1 + torch.exp(-self.k * (x - y)))

    def forward(self, features):
        p = torch.sigmoid(self.prob(features))
        t = torch.sigmoid(self.thresh(features))
        return self.step(p, t)
'''

# Seed 001: a segmentation model trained under CUDA AMP; ignored pixels have unbounded logits.
AMP = '''\
import torch
import torch.nn.functional as F


def train_epoch(model, loader, optimizer, scaler):
    for images, masks in loader:
        optimizer.zero_grad()
        with torch.autocast(device_type="cuda", dtype=torch.float16):
            logits = model(images.cuda())
            loss = F.cross_entropy(logits, masks.cuda(), ignore_index=255)
        scaler.scale(loss).backward()
        scaler.step(optimizer)
        scaler.update()
'''

# Seed 002: a fine-tuned classifier; the clip written after the step, and the log of the
# probabilities a method of the model returns.
CLASSIFIER = '''\
import torch
import torch.nn as nn


class Classifier(nn.Module):
    def __init__(self, hidden, labels):
        super().__init__()
        self.head = nn.Sequential(nn.Linear(hidden, 256), nn.ReLU(), nn.Linear(256, labels))

    def forward(self, pooled):
        return self.head(pooled)

    def probabilities(self, pooled):
        return torch.softmax(self(pooled), dim=-1)


def train(model: Classifier, loader, optimizer):
    for pooled, labels in loader:
        probabilities = model.probabilities(pooled)
        log_probs = torch.log(probabilities)
        loss = -log_probs.gather(1, labels[:, None]).mean()
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        torch.nn.utils.clip_grad_norm_(model.parameters(), max_norm=1.0)
'''

# Seed 003: a model whose forward ends in a sigmoid, trained with the BCE written out.
SIGMOID_MODEL = '''\
import torch
import torch.nn as nn
import torch.optim as optim


class TinyModel(nn.Module):
    def __init__(self):
        super().__init__()
        self.linear = nn.Linear(10, 1)

    def forward(self, x):
        return torch.sigmoid(self.linear(x))


model = TinyModel()
optimizer = optim.SGD(model.parameters(), lr=0.01)
x = torch.randn(4, 10) * 1000
y = torch.ones(4, 1)
for _ in range(10):
    optimizer.zero_grad()
    out = model(x)
    loss = (-y * torch.log(out) - (1 - y) * torch.log(1 - out)).mean()
    loss.backward()
    optimizer.step()
'''


@pytest.mark.parametrize("source, findings", [
    (STEP, [(13, "NAN101")]),
    (AMP, [(10, "NAN304")]),
    (CLASSIFIER, [(20, "NAN102"), (25, "NAN401")]),
    (SIGMOID_MODEL, [(22, "NAN301")]),
], ids=["000-step-function", "001-amp-cross-entropy", "002-clip-and-log", "003-sigmoid-bce"])
def test_each_seed_is_reported_with_no_flags(source, findings):
    assert _found(source) == findings


def test_the_messages_say_where_the_probability_came_from_and_what_was_measured():
    (log,) = [d for d in lint_source("train.py", CLASSIFIER, select_rules(Settings())).diagnostics if d.code == "NAN102"]
    assert "returned by `Classifier.probabilities`" in log.message and log.fix is None
    (bce,) = lint_source("train.py", SIGMOID_MODEL, select_rules(Settings())).diagnostics
    assert "`TinyModel.forward` via `model(...)`" in bce.message
    (ce,) = lint_source("train.py", AMP, select_rules(Settings())).diagnostics
    # What was measured, on which device, and no NaN claimed where none was seen.
    assert "measured on an H100" in ce.message and "CPU autocast computes it in float32" in ce.message
    assert "NaN" not in ce.message


_CLIP_BEFORE_STEP = (
    "        optimizer.step()\n        torch.nn.utils.clip_grad_norm_(model.parameters(), max_norm=1.0)\n",
    "        torch.nn.utils.clip_grad_norm_(model.parameters(), max_norm=1.0)\n        optimizer.step()\n",
)

# Each seed fixed as its rule's page says: (the code, then what is replaced by what).
FIXED = {
    "000-step-function": (STEP, [("torch.reciprocal(1 + torch.exp(-self.k * (x - y)))",
                                  "torch.sigmoid(self.k * (x - y))")]),
    "001-amp-cross-entropy": (AMP, [("F.cross_entropy(logits, ", "F.cross_entropy(logits.float(), ")]),
    # On the CPU, autocast computes the loss in float32: nothing to report.
    "001-cpu-autocast": (AMP, [('device_type="cuda"', 'device_type="cpu"'), (".cuda()", "")]),
    "002-clip-and-log": (CLASSIFIER, [
        ("torch.softmax(self(pooled), dim=-1)", "torch.log_softmax(self(pooled), dim=-1)"),
        ("log_probs = torch.log(probabilities)", "log_probs = probabilities"),
        _CLIP_BEFORE_STEP]),
    # The seed's own advice, in float32: an epsilon keeps the log finite (and the expression
    # is no longer exactly `log_softmax`, so not its form).
    "002-epsilon": (CLASSIFIER, [("torch.log(probabilities)", "torch.log(probabilities + 1e-8)"),
                                 _CLIP_BEFORE_STEP]),
    "003-sigmoid-bce": (SIGMOID_MODEL, [
        ("return torch.sigmoid(self.linear(x))", "return self.linear(x)"),
        ("loss = (-y * torch.log(out) - (1 - y) * torch.log(1 - out)).mean()",
         "loss = nn.functional.binary_cross_entropy_with_logits(out, y)")]),
}


@pytest.mark.parametrize("name", sorted(FIXED))
def test_each_seed_fixed_is_quiet(name):
    source, replacements = FIXED[name]
    for old, new in replacements:
        assert old in source
        source = source.replace(old, new)
    assert _found(source) == []
