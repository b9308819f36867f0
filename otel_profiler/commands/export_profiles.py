"""``otel-profiler export INPUT... --format otlp-profiles``: GPU and operator CPU time by call stack
as OpenTelemetry profiles (``export.profiles_otlp``), sent to the OTLP endpoint of the spans and/or
written to ``-o FILE.pb`` (length-delimited ``ExportProfilesServiceRequest`` messages). The run id
is chosen as for spans, so the profiles link to the step traces ``export`` (or the live run) sent.
Exit 1 when the endpoint cannot be reached or samples were not delivered.
"""

from __future__ import annotations

import argparse
import sys

from ..config import Settings
from ..names import terminal_safe
from ..profiler_warnings import print_warning
from ..shared.otlp_target import OtlpTarget
from ..spans.options import options_from_settings
from . import choose_run_ids, load_inputs


def send_profiles(args: argparse.Namespace, settings: Settings, target: OtlpTarget | None) -> int:
    """Send or write the inputs' profiles; ``target`` is the spans' OTLP target (or None)."""
    from ..export.profiles_target import ProfilesConfig, profiles_target
    from ..export.profiles_otlp import ProfilesSender, encode_requests
    from ..export.sinks import unreachable
    from ..export.sinks.files import DelimitedFile

    if args.output and not args.output.endswith(".pb"):
        print(f"otel-profiler: error: --output {terminal_safe(args.output)}: with --format otlp-profiles "
              "give a file name ending in .pb (protobuf)", file=sys.stderr)
        return 2
    if not target and not args.output:
        print("otel-profiler: error: give --endpoint or --output (or set OTEL_EXPORTER_OTLP_ENDPOINT)",
              file=sys.stderr)
        return 2
    target = profiles_target(target) if target is not None else None
    if target is not None:
        why = unreachable(target)
        if why is not None:
            print(f"otel-profiler: error: cannot reach {terminal_safe(target.describe())} ({why}); nothing "
                  "was exported", file=sys.stderr)
            return 1
    profile, status = load_inputs(args)
    options = options_from_settings(settings, "otel-profiler-export")
    options.service_name = args.service_name or options.service_name
    print(choose_run_ids(options, profile), file=sys.stderr)
    sender = ProfilesSender(ProfilesConfig(target, options, settings.export_retry_s),
                            print_warning) if target is not None else None
    out = DelimitedFile(args.output) if args.output else None
    samples = 0
    try:
        for rank in profile.ranks:
            if sender is not None:
                samples += sender.handle(rank.meta, rank.batch)
            if out is not None:
                written = 0
                for request, n in encode_requests(rank.meta, rank.batch, options):
                    out.write(request)
                    written += n
                samples = samples if sender is not None else samples + written
    finally:
        totals = sender.close() if sender is not None else None
        if out is not None:
            out.close()
    where = terminal_safe(", ".join(x for x in (target.describe() if target else "", args.output or "") if x))
    print(f"exported {samples} profile samples of {len(profile.ranks)} rank(s) to {where}"
          + (f"; {totals['delivered']} delivered" if totals else "")
          + (f"; {totals['lost']} not delivered" if totals and totals["lost"] else ""), file=sys.stderr)
    return status or (1 if totals and totals["lost"] else 0)
