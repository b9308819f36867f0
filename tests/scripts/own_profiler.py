"""A job that profiles itself with torch.profiler, as its own code does: FORM ``schedule`` (start(),
step() and stop() with a wait/warmup/active schedule that repeats) or ``context`` (the context
manager around a few steps in the middle of training). Prints what its own profiler recorded."""
import sys

import torch
import torch.profiler as tp

FORM = sys.argv[1]
ITERATIONS = int(sys.argv[2]) if len(sys.argv) > 2 else 30
model = torch.nn.Sequential(torch.nn.Linear(32, 64), torch.nn.ReLU(), torch.nn.Linear(64, 1))
optimizer = torch.optim.SGD(model.parameters(), lr=0.01)
x, y = torch.randn(16, 32), torch.randn(16, 1)
traces = []


def train_step() -> None:
    optimizer.zero_grad()
    torch.nn.functional.mse_loss(model(x), y).backward()
    optimizer.step()


if FORM == "schedule":
    prof = tp.profile(activities=[tp.ProfilerActivity.CPU],
                      schedule=tp.schedule(wait=1, warmup=1, active=3, repeat=2),
                      on_trace_ready=lambda p: traces.append(len(p.events())))
    prof.start()
    for i in range(ITERATIONS):
        train_step()
        prof.step()
    prof.stop()
else:
    for i in range(ITERATIONS):
        if i == ITERATIONS // 2:
            with tp.profile(activities=[tp.ProfilerActivity.CPU]) as prof:
                for _ in range(3):
                    train_step()
            traces.append(len(prof.events()))
        train_step()
print("own traces:", len(traces), "with events:", all(n > 0 for n in traces))
