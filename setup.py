"""Builds the native trace scanner and the one-pass nesting of events (both optional) and installs the zero-code startup hook ``otel_profiler.pth`` into site-packages (metadata: pyproject.toml).

The hook is one line Python runs at start-up: it reads ``OTEL_PROFILER_ENABLED`` and imports
nothing more unless profiling is asked for. A wheel carries it at its root (so it lands in
site-packages); an editable install writes it next to the editable install's own ``.pth``.
"""

import os

from setuptools import Extension, setup
from setuptools.command.build_py import build_py

HOOK = os.path.join("otel_profiler", "bootstrap", "otel_profiler.pth")


class BuildPyWithStartupHook(build_py):
    def run(self) -> None:
        super().run()
        if getattr(self, "editable_mode", False):  # editable: the wheel root is install_lib
            target = self.get_finalized_command("install").install_lib
        else:
            target = self.build_lib
        self.copy_file(HOOK, os.path.join(target, "otel_profiler.pth"), preserve_mode=False)

    def get_outputs(self, include_bytecode: bool = True) -> list:
        outputs = super().get_outputs(include_bytecode)
        if not getattr(self, "editable_mode", False):
            outputs.append(os.path.join(self.build_lib, "otel_profiler.pth"))
        return outputs


# The native trace scanner (cuda_tracer/trace_json/scan.py): optional, so that an install without a C
# compiler still works, reading every trace the Python way.
SCANNER = Extension("cuda_tracer.trace_json._scan", ["cuda_tracer/trace_json/_scan.c"],
                    depends=["cuda_tracer/trace_json/_scan_json.h", "cuda_tracer/trace_json/_scan_keys.h",
                             "cuda_tracer/trace_json/_scan_strings.h"],
                    optional=True,
                    extra_compile_args=["-O3"] if os.name == "posix" else [])

# Each event's innermost enclosing operator in one pass (otel_profiler/analysis/attribution/time_nesting.py):
# optional too; without it numpy's pointer jumping gives the same parents.
NESTING = Extension("otel_profiler.analysis.attribution._nesting",
                    ["otel_profiler/analysis/attribution/_nesting.c"], optional=True,
                    extra_compile_args=["-O3"] if os.name == "posix" else [])

setup(cmdclass={"build_py": BuildPyWithStartupHook}, ext_modules=[SCANNER, NESTING])
