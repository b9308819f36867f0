"""The API's keyword options as settings: ``Profiler(every_steps=10)`` is
``OTEL_PROFILER_EVERY_STEPS=10``; a step range given as a value (``steps=(100, 110)``) reaches the
session as that value (``StepRangeOption``), the text form being for the environment only."""

from __future__ import annotations

import operator
import os
from dataclasses import dataclass
from typing import Any, Mapping

from .. import config
from ..config.parsers import StepRange


def upload_warnings(settings: config.Settings) -> list[str]:
    """Why a set ``OTEL_PROFILER_UPLOAD`` will send nothing. The post-exit summarizer uploads; under
    ``run``, which turns that off in the job, ``run`` uploads and says it instead."""
    url = settings.upload.strip()
    if not url or not settings.summary_at_exit:
        return []
    from ..shared.upload import http_url, spool_beside, spool_problem

    problem = http_url(url) or ("" if settings.upload_token.strip()
                                else "OTEL_PROFILER_UPLOAD_TOKEN is not set")
    if problem:
        return [f"OTEL_PROFILER_UPLOAD: {problem}; the profile will not be uploaded"]
    spool = spool_beside(settings.profile_dir or os.path.join(settings.output_dir, "run"))
    unsafe = spool_problem(spool)
    return [f"OTEL_PROFILER_UPLOAD: cannot use the upload spool {spool} ({unsafe}); the profile will not be "
             "uploaded"] if unsafe else []


@dataclass(frozen=True)
class StepRangeOption:
    """A step range given as a value (``Profiler(steps=(100, 110))``, ``steps=None`` for none): it
    replaces ``OTEL_PROFILER_STEPS``, whose text form is for the environment only."""

    step_range: StepRange | None


def step_range_option(value: Any) -> StepRangeOption | str:
    """``value`` (a pair of step numbers, or None) as a step range; a problem (one line) otherwise."""
    if value is None:
        return StepRangeOption(None)
    try:
        if len(value) == 2 and not any(isinstance(n, bool) for n in value):
            first, stop = operator.index(value[0]), operator.index(value[1])
            if 0 <= first < stop:
                return StepRangeOption(StepRange((first, stop)))
    except TypeError:
        pass
    return f"steps={value!r}: expected (START, STOP) step numbers with 0 <= START < STOP, e.g. (100, 110)"


def apply_overrides(env: dict[str, str], overrides: Mapping[str, Any]) -> tuple[list[str], StepRangeOption | None]:
    """``Profiler(every_steps=10)`` → ``OTEL_PROFILER_EVERY_STEPS=10`` in ``env``; unknown names are
    problems. A step range given as a value (a pair, or None) is returned as one, not written."""
    problems = []
    steps = None
    for key, value in overrides.items():
        name = "OTEL_PROFILER_" + key.upper()
        if name not in config.VARIABLES:
            problems.append(f"unknown option {key!r}")
            continue
        if name == "OTEL_PROFILER_STEPS" and (value is None or isinstance(value, (tuple, list))):
            env.pop(name, None)  # the value replaces the variable
            option = step_range_option(value)
            if isinstance(option, str):
                problems.append(option)
            else:
                steps = option
            continue
        if isinstance(value, bool):
            text = "true" if value else "false"
        elif isinstance(value, (list, tuple, set, frozenset)):
            text = ",".join(map(str, value))
        else:
            text = str(value)
        env[name] = text
    return problems, steps
