"""The DataLoader ``__next__`` matcher of the insight rules: right on real loader names and linear on
long hostile names (issue 25's leftover: a regex ``DataLoader.*__next__`` was quadratic)."""

from __future__ import annotations

import pytest

from otel_profiler.analysis.insights.context import is_dataloader_next

MB20 = 20_000_000


@pytest.mark.parametrize("name,expected", [
    ("enumerate(DataLoader)#_SingleProcessDataLoaderIter.__next__", True),
    ("enumerate(DataLoader)#_MultiProcessingDataLoaderIter.__next__", True),
    ("torch/utils/data/dataloader.py(628): __next__", True),
    ("DataLoader\n__next__", False),  # not on one line
    ("__next__ DataLoader", False),  # wrong order
    ("torch/utils/data/dataloader.py(): __next__", False),
    ("aten::mm", False),
])
def test_real_loader_names(name, expected):
    assert is_dataloader_next(name) is expected


@pytest.mark.parametrize("unit,tail,expected", [
    ("DataLoader", "", False),  # quadratic for the old regex: every "DataLoader" retried to the end
    ("DataLoader", "__next__", True),
    ("utils/data/dataloader.py(1", "", False),
    ("utils/data/dataloader.py(", "", False),
])
def test_twenty_megabyte_hostile_names_finish_with_the_right_answer(unit, tail, expected):
    name = unit * (MB20 // len(unit)) + tail
    assert is_dataloader_next(name) is expected
    digits = "utils/data/dataloader.py(" + "7" * MB20 + tail
    assert is_dataloader_next(digits) is False
