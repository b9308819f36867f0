"""Forward-forward training: each layer is trained in turn, with its own optimizer, on the detached
output of the layers before it (LAYERS layers, STEPS optimizer steps each)."""
import sys

import torch

LAYERS = int(sys.argv[1]) if len(sys.argv) > 1 else 2
STEPS = int(sys.argv[2]) if len(sys.argv) > 2 else 30
torch.manual_seed(0)
positive, negative = torch.randn(64, 32) + 1, torch.randn(64, 32) - 1
layers = [torch.nn.Linear(32, 32) for _ in range(LAYERS)]
threshold = 2.0


def goodness(layer, x):
    return torch.relu(layer(x / (x.norm(dim=1, keepdim=True) + 1e-4))).pow(2).mean(dim=1)


for layer in layers:
    optimizer = torch.optim.Adam(layer.parameters(), lr=0.03)
    for _ in range(STEPS):
        loss = torch.nn.functional.softplus(torch.cat([threshold - goodness(layer, positive),
                                                       goodness(layer, negative) - threshold])).mean()
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
    with torch.no_grad():
        positive, negative = torch.relu(layer(positive)), torch.relu(layer(negative))
print(f"forward-forward: {LAYERS} layers, {STEPS} steps each")
