"""A job read through the cluster, as the renderers read it: the merged summary (the same shape as
one profile's), the thresholds it was judged by, and the aligned timeline's lanes. No events travel
to this process, so there is no profile."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from ..analysis.insights import Thresholds

if TYPE_CHECKING:  # the cluster's reading (and Dask's modules) only where a cluster is used
    from .analyse import ClusterSummary


@dataclass
class ClusterDocument:
    """A merged multi-rank summary in the shape the summary renderers read."""

    summary: ClusterSummary
    thresholds: Thresholds
    thresholds_given: bool
    lanes: list[dict[str, Any]]
    profile: None = None
