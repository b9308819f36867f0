"""A small CNN with nested blocks trained for 14 optimizer steps: its module calls have attribute
paths (stem, layer1.0.conv1, head) and classes used several times (Conv2d, Block)."""
import torch
import torch.nn as nn


class Block(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.conv1 = nn.Conv2d(4, 4, 3, padding=1)
        self.conv2 = nn.Conv2d(4, 4, 3, padding=1)

    def forward(self, x):
        return torch.relu(self.conv2(torch.relu(self.conv1(x)))) + x


class Net(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.stem = nn.Conv2d(1, 4, 3, padding=1)
        self.layer1 = nn.Sequential(Block(), Block())
        self.head = nn.Linear(4 * 8 * 8, 10)

    def forward(self, x):
        return self.head(self.layer1(self.stem(x)).flatten(1))


torch.manual_seed(0)
net = Net()
optimizer = torch.optim.SGD(net.parameters(), lr=0.01)
for _ in range(14):
    optimizer.zero_grad()
    net(torch.randn(8, 1, 8, 8)).sum().backward()
    optimizer.step()
print("module-paths: 14 steps")
