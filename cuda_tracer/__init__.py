"""Framework-agnostic GPU activity capture and the columnar event model. Imports no OpenTelemetry."""

from .events import EventBatch, Kind, MemcpyKind, SyncKind
from .profile import Profile, RankProfile, TraceError
from .loading import load_profile

__all__ = ["EventBatch", "Kind", "MemcpyKind", "SyncKind", "Profile", "RankProfile", "TraceError",
           "load_profile"]
