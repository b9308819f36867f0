"""A small model trained in one of the ways torch.compile is used; prints Dynamo's counters at the end.

Usage: compiled_training.py MODE [ITERATIONS]. MODE: eager, fullgraph, default, graph_break (the model
breaks its own graph), method (``Module.compile()``), optimizer (``torch.compile(opt.step)``),
reduce_overhead and max_autotune_no_cudagraphs (Inductor), compiled_autograd (a compiled function
that runs forward and backward, with compiled autograd on), train_step (a compiled function that
runs forward, backward and the optimizer step).
The last stdout line is a JSON document: Dynamo's counters that say what was compiled, and the loss.
"""
import json
import sys

import torch
from torch._dynamo.utils import counters

MODE = sys.argv[1]
ITERATIONS = int(sys.argv[2]) if len(sys.argv) > 2 else 12
INDUCTOR = MODE in ("reduce_overhead", "max_autotune_no_cudagraphs", "compiled_autograd")
BACKEND = "inductor" if INDUCTOR else "eager"  # eager: Dynamo's capture without code generation


class Net(torch.nn.Module):
    def __init__(self, breaks: bool) -> None:
        super().__init__()
        self.encoder = torch.nn.Sequential(torch.nn.Linear(32, 64), torch.nn.ReLU())
        self.head = torch.nn.Linear(64, 1)
        self.breaks = breaks

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = self.encoder(x)
        if self.breaks:
            torch._dynamo.graph_break()  # the job's own graph break
        return self.head(h)


if MODE == "compiled_autograd":
    torch._dynamo.config.compiled_autograd = True  # backward passes compiled too
torch.manual_seed(0)
net = Net(breaks=MODE == "graph_break")
model = net
if MODE == "fullgraph":
    model = torch.compile(net, fullgraph=True, backend=BACKEND)
elif MODE in ("default", "graph_break"):
    model = torch.compile(net, backend=BACKEND)
elif MODE == "method":
    net.compile(backend=BACKEND)
elif MODE == "reduce_overhead":
    model = torch.compile(net, mode="reduce-overhead")
elif MODE == "max_autotune_no_cudagraphs":
    model = torch.compile(net, mode="max-autotune-no-cudagraphs")
optimizer = torch.optim.SGD(net.parameters(), lr=0.01)
step = torch.compile(optimizer.step, backend=BACKEND) if MODE == "optimizer" else optimizer.step
x, y = torch.randn(16, 32), torch.randn(16, 1)


def forward_backward() -> torch.Tensor:
    loss = torch.nn.functional.mse_loss(model(x), y)
    loss.backward()
    return loss


def whole_step() -> torch.Tensor:
    loss = forward_backward()
    optimizer.step()
    return loss


if MODE == "compiled_autograd":
    forward_backward = torch.compile(forward_backward, backend=BACKEND)
train_step = torch.compile(whole_step, backend=BACKEND) if MODE == "train_step" else None
for i in range(ITERATIONS):
    optimizer.zero_grad()
    if train_step is not None:
        loss = train_step()
    else:
        loss = forward_backward()
        step()
kept = ("stats", "graph_break", "frames", "recompiles", "unimplemented", "compiled_autograd")
print(json.dumps({"counters": {k: dict(v) for k, v in sorted(counters.items()) if k in kept},
                  "loss": round(loss.item(), 5)}, sort_keys=True))
