"""Every environment variable the code reads is declared in ``otel_profiler.config`` or allowed by name.

The source of ``otel_profiler/`` and ``cuda_tracer/`` is read (``ast``, nothing imported) for reads of
the process environment whose name can be known without running the code: ``os.environ.get(NAME)``,
``os.environ[NAME]``, ``NAME in os.environ``, ``os.getenv(NAME)``, the same through a local name bound
to ``os.environ`` (``env = os.environ if env is None else env``) or a parameter called ``env`` or
``environ`` in a module that reads ``os.environ``, and names passed beside the environment to a helper
(``_int_env(env, "RANK", "SLURM_PROCID")``). NAME is a string literal, a module constant (also one
of another module, ``client.TOKEN_VARIABLE``), or the loop variable over a constant tuple.

Each name must be in ``otel_profiler.config.VARIABLES`` (so ``otel-profiler`` documents it and a job
that sets it is not told it is unknown) or in ``NOT_OURS`` below, the variables other programs set
that the profiler only looks at.
"""

from __future__ import annotations

import ast
import functools
from dataclasses import dataclass
from pathlib import Path
from typing import Iterable, Iterator, Mapping

from otel_profiler.bootstrap import SAID_SWITCH_ENV
from otel_profiler.config import VARIABLES
from otel_profiler.live.child_processes import RUN_ENV
from otel_profiler.live.wiring import EXPORTER_CHILD_ENV

REPO = Path(__file__).resolve().parents[2]
PACKAGES = ("otel_profiler", "cuda_tracer")
ENVIRONMENT_PARAMETERS = {"env", "environ"}

# Variables that are not the profiler's settings: set by launchers, schedulers, platforms, the system
# or other tools, and only read to describe the job or to stay out of another tool's way.
NOT_OURS = {
    # torchrun / torch.distributed: the process's place in the job, and the job's id.
    "RANK", "LOCAL_RANK", "WORLD_SIZE", "TORCHELASTIC_RUN_ID",
    # SLURM and Open MPI launchers: the same facts under their names.
    "SLURM_PROCID", "SLURM_LOCALID", "SLURM_NTASKS", "SLURM_JOB_ID", "SLURM_STEP_ID", "SLURM_JOB_NAME",
    "OMPI_COMM_WORLD_RANK", "OMPI_COMM_WORLD_LOCAL_RANK", "OMPI_COMM_WORLD_SIZE",
    # Kubernetes and the login: resource attributes (pod, namespace, host, user).
    "KUBERNETES_SERVICE_HOST", "POD_NAME", "POD_NAMESPACE", "HOSTNAME", "USER", "LOGNAME",
    # The platform's name for the machine type (SageMaker's, a generic one): a resource attribute.
    "SM_CURRENT_INSTANCE_TYPE", "INSTANCE_TYPE",
    # Where per-user caches go (the app's mirror of a remote store).
    "XDG_CACHE_HOME",
    # Another profiler (Nsight Systems, an NVTX or CUDA injection) already attached: stay out of its way.
    "CUDA_INJECTION64_PATH", "NVTX_INJECTION64_PATH",
    # Proxies gRPC honours: with one set, the OTLP target's reach is not tested directly.
    "grpc_proxy", "https_proxy", "http_proxy", "GRPC_PROXY", "HTTPS_PROXY", "HTTP_PROXY",
    # numpy's BLAS pool size: set by the command line only while a subcommand's module is imported,
    # unless the user set it (the user's value is kept).
    "OPENBLAS_NUM_THREADS",
    # Internal: marks the profiler's own exporter processes; a job's run and root process, passed on
    # to its child processes; a misspelt switch already named (never set by users).
    EXPORTER_CHILD_ENV, RUN_ENV, SAID_SWITCH_ENV,
}


@dataclass(frozen=True)
class Read:
    name: str
    path: str
    line: int


def _constant_strings(node: ast.AST | None) -> list[str] | None:
    """The strings of a literal string, or of a literal tuple/list/set of them (None: anything else)."""
    if isinstance(node, ast.Constant) and isinstance(node.value, str):
        return [node.value]
    if isinstance(node, (ast.Tuple, ast.List, ast.Set)):
        strings = [s for element in node.elts for s in (_constant_strings(element) or [])]
        return strings if len(strings) == len(node.elts) else None
    return None


def module_constants(tree: ast.Module) -> dict[str, ast.AST]:
    """Module-level ``NAME = value`` (and annotated) assignments."""
    constants: dict[str, ast.AST] = {}
    for statement in tree.body:
        if isinstance(statement, ast.Assign) and statement.value is not None:
            for target in statement.targets:
                if isinstance(target, ast.Name):
                    constants[target.id] = statement.value
        elif isinstance(statement, ast.AnnAssign) and statement.value is not None \
                and isinstance(statement.target, ast.Name):
            constants[statement.target.id] = statement.value
    return constants


def _is_os_environ(node: ast.AST) -> bool:
    return (isinstance(node, ast.Attribute) and node.attr == "environ"
            and isinstance(node.value, ast.Name) and node.value.id == "os")


def _mentions_os_environ(node: ast.AST | None) -> bool:
    return node is not None and any(_is_os_environ(child) for child in ast.walk(node))


def _is_environment_value(node: ast.AST | None) -> bool:
    """``os.environ`` itself, a copy of it, or it as one choice (``os.environ if env is None else env``)."""
    if node is None:
        return False
    if _is_os_environ(node):
        return True
    if isinstance(node, ast.IfExp):
        return _is_environment_value(node.body) or _is_environment_value(node.orelse)
    if isinstance(node, ast.BoolOp):
        return any(_is_environment_value(value) for value in node.values)
    if isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id == "dict":
        return bool(node.args) and _is_environment_value(node.args[0])
    if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr == "copy":
        return _is_environment_value(node.func.value)
    return False


class _Scope:
    """What one function (or the module body) binds: names of the environment, loop variables."""

    def __init__(self, body: ast.AST, parameters: list[ast.arg], defaults: Mapping[str, ast.AST],
                 module_reads_environ: bool, outer: _Scope | None = None) -> None:
        shadowed = {parameter.arg for parameter in parameters}
        self.environment: set[str] = set(outer.environment - shadowed) if outer else set()
        # name -> (iterable, position in the loop's tuple target)
        self.loops: dict[str, tuple[ast.AST, int | None]] = dict(outer.loops) if outer else {}
        for parameter in parameters:
            if _is_environment_value(defaults.get(parameter.arg)) or (
                    module_reads_environ and parameter.arg in ENVIRONMENT_PARAMETERS):
                self.environment.add(parameter.arg)
        for node in _own_nodes(body):
            if isinstance(node, (ast.Assign, ast.AnnAssign)) and _is_environment_value(node.value):
                targets = node.targets if isinstance(node, ast.Assign) else [node.target]
                self.environment.update(t.id for t in targets if isinstance(t, ast.Name))
            elif isinstance(node, (ast.For, ast.comprehension)):
                if isinstance(node.target, ast.Name):
                    self.loops[node.target.id] = (node.iter, None)
                elif isinstance(node.target, ast.Tuple):
                    for position, element in enumerate(node.target.elts):
                        if isinstance(element, ast.Name):
                            self.loops[element.id] = (node.iter, position)

    def is_environment(self, node: ast.AST) -> bool:
        return _is_os_environ(node) or (isinstance(node, ast.Name) and node.id in self.environment)


def _own_nodes(body: ast.AST) -> Iterator[ast.AST]:
    """The nodes of a function or module, not those of the functions defined inside it."""
    stack = list(ast.iter_child_nodes(body))
    while stack:
        node = stack.pop()
        yield node
        if not isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda, ast.ClassDef)):
            stack.extend(ast.iter_child_nodes(node))


class _Resolver:
    def __init__(self, constants: dict[str, ast.AST], everywhere: dict[str, ast.AST]) -> None:
        self.constants = constants  # this module's
        self.everywhere = everywhere  # every scanned module's, for ``module.NAME``

    def names(self, node: ast.AST, scope: _Scope) -> list[str] | None:
        """The variable names ``node`` evaluates to, when the source says so without running it."""
        strings = _constant_strings(node)
        if strings is not None:
            return strings
        if isinstance(node, ast.Name):
            if node.id in scope.loops:
                iterable, position = scope.loops[node.id]
                return self._elements(iterable, position)
            if node.id in self.constants:
                return _constant_strings(self.constants[node.id])
        if isinstance(node, ast.Attribute) and node.attr in self.everywhere:
            return _constant_strings(self.everywhere[node.attr])
        return None

    def _elements(self, iterable: ast.AST, position: int | None) -> list[str] | None:
        if isinstance(iterable, ast.Call) and isinstance(iterable.func, ast.Attribute) \
                and iterable.func.attr in ("items", "keys") and position in (0, None):
            iterable = iterable.func.value
            if isinstance(iterable, ast.Name):
                iterable = self.constants.get(iterable.id, iterable)
            if isinstance(iterable, ast.Dict):
                return _constant_strings(ast.Tuple(elts=[k for k in iterable.keys if k is not None]))
            return None
        if isinstance(iterable, ast.Name):
            iterable = self.constants.get(iterable.id, iterable)
        if position is None:
            return _constant_strings(iterable)
        if isinstance(iterable, (ast.Tuple, ast.List)):
            picked = [e.elts[position] for e in iterable.elts
                      if isinstance(e, (ast.Tuple, ast.List)) and len(e.elts) > position]
            return _constant_strings(ast.Tuple(elts=picked)) if len(picked) == len(iterable.elts) else None
        return None


def environment_reads(source: str, path: str, everywhere: dict[str, ast.AST] | None = None) -> list[Read]:
    """Every read of the environment in ``source`` whose variable name the source states."""
    tree = ast.parse(source, filename=path)
    constants = module_constants(tree)
    resolver = _Resolver(constants, everywhere if everywhere is not None else constants)
    module_reads_environ = _mentions_os_environ(tree)
    reads: list[Read] = []

    def visit(body: ast.AST, scope: _Scope) -> None:
        for node in _own_nodes(body):
            for key in _keys_read(node, scope):
                for name in resolver.names(key, scope) or []:
                    reads.append(Read(name, path, getattr(node, "lineno", 0)))
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda)):
                arguments = node.args
                parameters = arguments.posonlyargs + arguments.args + arguments.kwonlyargs
                positional = arguments.posonlyargs + arguments.args
                defaults = {p.arg: d for p, d in zip(positional[len(positional) - len(arguments.defaults):],
                                                     arguments.defaults)}
                defaults.update({p.arg: d for p, d in zip(arguments.kwonlyargs, arguments.kw_defaults)
                                 if d is not None})
                visit(node, _Scope(node, parameters, defaults, module_reads_environ, scope))
            elif isinstance(node, ast.ClassDef):
                visit(node, _Scope(node, [], {}, module_reads_environ, scope))

    visit(tree, _Scope(tree, [], {}, module_reads_environ))
    return reads


def _keys_read(node: ast.AST, scope: _Scope) -> list[ast.AST]:
    """The expressions naming the variables ``node`` reads from the environment."""
    if isinstance(node, ast.Call):
        func = node.func
        if isinstance(func, ast.Attribute) and func.attr in ("get", "setdefault") \
                and scope.is_environment(func.value) and node.args:
            return [node.args[0]]
        if isinstance(func, ast.Attribute) and func.attr == "getenv" \
                and isinstance(func.value, ast.Name) and func.value.id == "os" and node.args:
            return [node.args[0]]
        if any(scope.is_environment(argument) for argument in node.args):  # a helper given env and names
            return [a for a in [*node.args, *(k.value for k in node.keywords)]
                    if _constant_strings(a) is not None and not isinstance(a, (ast.Tuple, ast.List, ast.Set))]
    if isinstance(node, ast.Subscript) and isinstance(node.ctx, ast.Load) and scope.is_environment(node.value):
        return [node.slice]
    if isinstance(node, ast.Compare) and any(isinstance(op, (ast.In, ast.NotIn)) for op in node.ops) \
            and scope.is_environment(node.comparators[-1]):
        return [node.left]
    return []


def source_files() -> list[Path]:
    return sorted(path for package in PACKAGES for path in (REPO / package).rglob("*.py"))


def all_constants(paths: list[Path]) -> dict[str, ast.AST]:
    everywhere: dict[str, ast.AST] = {}
    for path in paths:
        everywhere.update(module_constants(ast.parse(path.read_text(), filename=str(path))))
    return everywhere


def undeclared(reads: Iterable[Read]) -> list[Read]:
    return [read for read in reads if read.name not in VARIABLES and read.name not in NOT_OURS]


@functools.lru_cache(maxsize=1)
def repository_reads() -> tuple[Read, ...]:
    paths = source_files()
    everywhere = all_constants(paths)
    return tuple(read for path in paths
                 for read in environment_reads(path.read_text(), path.relative_to(REPO).as_posix(), everywhere))


# ---------------------------------------------------------------------------------------- tests
def test_every_variable_the_code_reads_is_declared() -> None:
    missing = undeclared(repository_reads())
    assert not missing, "environment variables read but not declared in otel_profiler.config:\n" + "\n".join(
        f"{read.path}:{read.line}: {read.name}" for read in missing)


def test_every_name_allowed_is_read() -> None:
    """The allow-list names only what the code reads (a name no longer read leaves it)."""
    unread = NOT_OURS - {read.name for read in repository_reads()}
    assert not unread, f"NOT_OURS names variables nothing reads any more: {sorted(unread)}"


def test_the_reads_of_the_code_are_found() -> None:
    found = {(read.path, read.name) for read in repository_reads()}
    # The scanner's own switch, the launcher's rank (through a helper), a proxy (a loop over a constant
    # tuple of another module's) and the upload token (a constant of another module).
    for expected in [("cuda_tracer/trace_json/scan.py", "OTEL_PROFILER_PURE_PYTHON"),
                     ("otel_profiler/live/resource.py", "LOCAL_RANK"),
                     ("otel_profiler/export/sinks/__init__.py", "https_proxy")]:
        assert expected in found, f"{expected} not found among {sorted(found)}"
    assert any(read.name == "OTEL_PROFILER_UPLOAD_TOKEN" for read in repository_reads())


def test_an_undeclared_read_fails(tmp_path: Path) -> None:
    module = tmp_path / "reads.py"
    module.write_text(
        "import os\n"
        "NAMES = ('OTEL_PROFILER_FROM_A_TUPLE', 'RANK')\n"
        "PLAIN = 'OTEL_PROFILER_FROM_A_CONSTANT'\n"
        "def direct():\n"
        "    return os.environ.get('OTEL_PROFILER_NOT_DECLARED'), os.getenv('SOME_TOOL_SETTING')\n"
        "def aliased(env=None):\n"
        "    env = os.environ if env is None else env\n"
        "    if 'OTEL_PROFILER_TESTED_WITH_IN' in env:\n"
        "        return env['OTEL_PROFILER_SUBSCRIPT'], env[PLAIN]\n"
        "    return [env.get(name) for name in NAMES], helper(env, 'OTEL_PROFILER_THROUGH_A_HELPER')\n"
        "def declared():\n"
        "    return os.environ.get('OTEL_PROFILER_PURE_PYTHON'), os.environ.get('LOCAL_RANK')\n"
        "def written():\n"
        "    os.environ['OTEL_PROFILER_ONLY_WRITTEN'] = '1'\n"
        "def other_mapping(settings):\n"
        "    return settings.get('OTEL_PROFILER_NOT_THE_ENVIRONMENT')\n")
    reads = environment_reads(module.read_text(), module.name)
    assert sorted(read.name for read in undeclared(reads)) == sorted([
        "OTEL_PROFILER_NOT_DECLARED", "SOME_TOOL_SETTING", "OTEL_PROFILER_TESTED_WITH_IN",
        "OTEL_PROFILER_SUBSCRIPT", "OTEL_PROFILER_FROM_A_CONSTANT", "OTEL_PROFILER_FROM_A_TUPLE",
        "OTEL_PROFILER_THROUGH_A_HELPER"])
    assert {"OTEL_PROFILER_PURE_PYTHON", "LOCAL_RANK", "RANK"} <= {read.name for read in reads}
