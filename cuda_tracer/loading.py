"""Turns what a user points the tools at into one ``Profile``: trace files, folders of per-rank trace
files, profile folders written by a live run, and TensorFlow profiles. The one place that knows every
input format, so the readers themselves depend only on the profile types.
"""

from __future__ import annotations

import glob
import os
from typing import Iterable

from .profile import Profile, RankProfile, TraceError, is_profile_folder, read_profile_folder
from .trace_files import is_trace_file, read_trace
from .xplane import XPLANE_SUFFIX, read_xplane, xplane_files


def load_profile(paths: Iterable[str]) -> Profile:
    """Load trace files, folders of trace files, profile folders and TensorFlow profiles (``.xplane.pb``,
    a run folder or a TF logdir) into one profile.

    Raises ``TraceError`` naming the first unusable input.
    """
    profile = Profile()
    for path in paths:
        if os.path.isdir(path):
            if is_profile_folder(path):
                profile.ranks.extend(read_profile_folder(path))
                profile.sources.append(path)
                continue
            files = sorted(p for p in glob.glob(os.path.join(path, "*")) if is_trace_file(p))
            read = read_trace
            if not files:  # a TensorFlow profiler logdir or run folder
                files, read = xplane_files(path), read_xplane
            if not files:
                raise TraceError(path, "folder holds no trace files (*.json, *.json.gz), "
                                       "no TensorFlow profile (*.xplane.pb) and no otel-profiler profile")
            for f in files:
                profile.ranks.append(read(f))
                profile.sources.append(f)
        elif not os.path.exists(path):
            raise TraceError(path, "no such file or folder")
        elif path.endswith(XPLANE_SUFFIX):
            profile.ranks.append(read_xplane(path))
            profile.sources.append(path)
        else:
            profile.ranks.append(read_trace(path))
            profile.sources.append(path)
    _number_unranked(profile.ranks)
    return profile


def _number_unranked(ranks: list[RankProfile]) -> None:
    """Ranks without ``distributedInfo`` get the next free number, so each rank stays distinct."""
    used = {r.rank for r in ranks if r.rank >= 0}
    nxt = 0
    for r in ranks:
        if r.rank < 0:
            while nxt in used:
                nxt += 1
            r.meta["rank"] = nxt
            used.add(nxt)
            if len(r.batch):
                r.batch.columns["rank"][:] = nxt
