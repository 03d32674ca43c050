"""A small gated classifier and its training step, the way such code often gets written.

It runs (`python examples/train_step.py`: a few steps on random data, CPU), and in float32
with small inputs it even trains. It also hides NaN/Inf hazards that appear once the logits
grow, or once the same code runs in float16 under autocast:

    nanlint examples/train_step.py                # report them (the rules on by default)
    nanlint --diff examples/train_step.py         # show the fixes
    nanlint --select ALL examples/train_step.py   # every rule, those off by default too
"""

import torch
import torch.nn as nn


class GatedClassifier(nn.Module):
    def __init__(self, features: int, hidden: int, classes: int):
        super().__init__()
        self.encode = nn.Linear(features, hidden)
        self.gate = nn.Linear(features, hidden)
        self.head = nn.Linear(hidden, classes)
        self.temperature = 4.0
        # A learned logit scale, kept positive.
        self.raw_scale = nn.Parameter(torch.zeros(()))

    def forward(self, x):
        h = torch.relu(self.encode(x))
        # A sigmoid gate written out by hand: once the gate logit is below -11 in float16
        # (-88.7 in float32), exp overflows and the gradient turns NaN.
        g = 1 / (1 + torch.exp(-self.temperature * self.gate(x)))
        # softplus by hand: inf once raw_scale passes 11 in float16.
        scale = torch.log(1 + torch.exp(self.raw_scale))
        return scale * self.head(h * g)


def training_step(model, optimizer, x, y, max_norm=1.0):
    logits = model(x)
    # log of a softmax: the softmax underflows to 0 for a class far below the best one,
    # and log(0) is -inf.
    log_probs = torch.log(torch.softmax(logits, dim=-1))
    loss = -log_probs.gather(1, y[:, None]).mean()
    # The free energy, logged to spot out-of-distribution batches: exp overflows first.
    energy = -torch.log(torch.exp(logits).sum(dim=-1)).mean()
    # The entropy of the batch's labels, logged to spot skewed batches: a class missing from
    # the batch has frequency 0, and 0 * log(0) is NaN.
    label_freq = torch.bincount(y, minlength=logits.shape[-1]) / len(y)
    label_entropy = -(label_freq * torch.log(label_freq)).sum()
    optimizer.zero_grad()
    loss.backward()
    optimizer.step()
    # Clipping after the step: the update already used the unclipped gradient.
    torch.nn.utils.clip_grad_norm_(model.parameters(), max_norm)
    return loss.detach(), energy.detach(), label_entropy


def main():
    torch.manual_seed(0)
    model = GatedClassifier(features=16, hidden=32, classes=4)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    x = torch.randn(64, 16)
    y = torch.randint(0, 4, (64,))
    for step in range(5):
        loss, energy, label_entropy = training_step(model, optimizer, x, y)
        print(f"step {step}: loss {loss.item():.4f}, energy {energy.item():.4f}, "
              f"label entropy {label_entropy.item():.4f}")


if __name__ == "__main__":
    main()
