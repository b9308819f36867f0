"""Names a person can read: demangled C++ symbols and a short form of long templated names.

- ``demangle(name)``: an Itanium-mangled symbol (``_Z...``, as ROCm, Composable Kernel, CUTLASS or
  compiled kernels are recorded) as C++ reads it, through the ``cpp-demangle`` package (Python
  bindings to the Rust ``cpp_demangle`` crate; it reads names that libstdc++'s ``__cxa_demangle``
  rejects, e.g. CUTLASS convolution kernels). Anything else, or a name it cannot read, comes back
  unchanged. Without the package every name comes back unchanged.
- ``short_name(name)``: for a C++ symbol (mangled, or with ``void`` or templates and namespaces),
  the demangled name without return type and parameter list, namespaces
  dropped, template arguments nested deeper than ``depth`` folded to ``<…>``, and cut with ``…``
  past ``limit`` characters. The full name stays one hover or click away wherever a short form is
  shown. A mangled name no demangler reads (e.g. C++20 ``Tn`` template parameters in ROCm kernels)
  gets a fallback read from its nested name alone: ``sgl_hip::activation::act_and_mul_kernel<…>``.
- ``short_names(names)``: short forms of several names, folding less where two would read the same.
- ``torch_range(name)``: what one of torch's own ranges marks (``step``, ``optimizer``, ``data``,
  ``compiled``, ``distributed``), or None for an operator or a range the user's code opened. torch
  records these with ``record_function`` as the user's annotations are recorded: they are told
  apart by name only.
- ``terminal_safe(text)``: ``text`` as it may be printed to a terminal, control characters and
  lone surrogates escaped (``cuda_tracer.terminal_lines``): every name printed goes through it.
"""

from __future__ import annotations

import logging
import re
from functools import lru_cache
from typing import Iterable

from cuda_tracer.terminal_lines import terminal_safe  # noqa: F401  (one definition, re-exported)

log = logging.getLogger(__name__)

try:
    from cpp_demangle import demangle as _cpp_demangle
except ImportError:  # names stay as recorded
    _cpp_demangle = None

FOLD = "…"

_TORCH_RANGES: tuple[tuple[str, str], ...] = (  # (name prefix, what it marks), as torch names them
    ("ProfilerStep#", "step"),  # torch.profiler's step() (and this profiler's steps)
    ("Optimizer.step#", "optimizer"),  # Optimizer.step of every torch.optim optimizer
    ("Optimizer.zero_grad#", "optimizer"),
    ("enumerate(DataLoader)#", "data"),  # each batch a DataLoader iterator yields
    ("Torch-Compiled Region", "compiled"),  # torch.compile's code
    ("TorchDynamo Cache Lookup", "compiled"),
    ("CompiledFunction", "compiled"),  # AOTAutograd's forward and backward
    ("## Call CompiledFxGraph", "compiled"),  # Inductor's compiled graph
    ("DistributedDataParallel.forward", "distributed"),
    ("DataParallel.forward", "distributed"),
)
TORCH_RANGE_KINDS = ("step", "optimizer", "data", "compiled", "distributed")


@lru_cache(maxsize=65536)
def torch_range(name: str) -> str | None:
    """What ``name`` marks when it is one of torch's own ranges (see the module docstring)."""
    for prefix, kind in _TORCH_RANGES:
        if name.startswith(prefix):
            return kind
    return None


@lru_cache(maxsize=65536)
def demangle(name: str) -> str:
    """``name`` demangled when it is an Itanium-mangled symbol, else ``name`` itself."""
    if _cpp_demangle is None or not name.startswith(("_Z", "__Z")):
        return name
    try:
        out = _cpp_demangle(name[1:] if name.startswith("__Z") else name)
    except Exception:  # not a well-formed symbol (a CPU op that merely starts with _Z)
        log.debug("a symbol could not be demangled; its name stays as it is", exc_info=True)
        return name
    if not isinstance(out, str) or not out:
        return name
    # The spelling of c++filt and Nsight: 8u rather than (unsigned int)8; no ", >" for empty packs.
    out = _LITERAL.sub(lambda m: m.group(2) + _SUFFIX[m.group(1)], out)
    return _EMPTY_PACK.sub(lambda m: "> >" if m.group(1) else ">", out)


_SUFFIX = {"int": "", "unsigned int": "u", "long": "l", "unsigned long": "ul", "long long": "ll",
           "unsigned long long": "ull"}
_EMPTY_PACK = re.compile(r", >(>?)")
_LITERAL = re.compile(r"\((int|unsigned int|long|unsigned long|long long|unsigned long long)\)(-?\d+)")


def demangled(names: Iterable[str]) -> list[str]:
    return [demangle(n) for n in names]


_OPEN, _CLOSE = "<([", ">)]"
_BRACKET = re.compile(r"[<>()\[\]]")
_BRACKET_OR_SPACE = re.compile(r"[<>()\[\] ]")
_ANGLE = re.compile(r"[<>]")
_PAREN = re.compile(r"[()]")


def _split_top(text: str) -> tuple[str, str] | None:
    """``text`` as (head, trailing parameter list) when it ends with a balanced ``(...)``."""
    if not text.endswith(")"):
        return None
    depth = 0
    for m in reversed(list(_BRACKET.finditer(text))):  # brackets only: names run to hundreds of characters
        c = m.group()
        if c in _CLOSE:
            depth += 1
        else:
            depth -= 1
            if depth == 0:
                return (text[:m.start()], text[m.start():]) if c == "(" else None
    return None


def _balanced(text: str) -> bool:
    depth = 0
    for c in _BRACKET.findall(text):
        if c in _OPEN:
            depth += 1
        else:
            depth -= 1
            if depth < 0:
                return False
    return depth == 0


def _drop_return_type(text: str) -> str:
    """``void ns::f<...>`` -> ``ns::f<...>``: drop what precedes the last top-level space."""
    depth, cut = 0, -1
    for m in _BRACKET_OR_SPACE.finditer(text):
        c = m.group()
        if c in _OPEN:
            depth += 1
        elif c in _CLOSE:
            depth -= 1
        elif depth == 0:
            cut = m.start()
    return text[cut + 1:] if cut >= 0 else text


_QUALIFIER = re.compile(r"(?<![\w>)}])[A-Za-z_]\w*::|\(anonymous namespace\)::")


def _unqualify(text: str) -> str:
    """Drop namespace/class qualifiers (``at::native::f`` -> ``f``) at every nesting level; those
    after a template or a lambda (``f<int>::g``, ``{lambda()#1}::operator()``) stay."""
    previous = None
    while previous != text:
        previous, text = text, _QUALIFIER.sub("", text)
    return text


_CALL_OPERATOR = re.compile(r"::operator\(\)\(\)(?: const)?")


def _fold_parameters(text: str) -> str:
    """Parameter lists inside the name (``silu_kernel(TensorIteratorBase&)::{lambda()#1}``) become
    ``(…)``; a lambda's own parameters stay (they tell lambdas apart)."""
    out, start = "", 0  # text[start:] not yet copied
    stack: list[tuple[int, bool]] = []  # (length of out at the "(", folded)
    for m in _PAREN.finditer(text):
        if m.group() == ")" and not stack:
            continue  # an unmatched ")" is copied as it is
        out += text[start:m.start()]
        start = m.end()
        if m.group() == "(":
            fold = bool(out) and (out[-1].isalnum() or out[-1] in "_>") and not out[-6:].endswith("lambda")
            stack.append((len(out), fold))
            out += "("
        else:
            pos, fold = stack.pop()
            if fold and len(out) > pos + 1:
                out = out[:pos + 1] + FOLD
            out += ")"
    return out + text[start:]


def _fold(text: str, depth: int) -> str:
    """Template arguments nested deeper than ``depth`` become ``…``."""
    out, level, start = [], 0, 0  # text[start:] not yet copied (or skipped)
    for m in _ANGLE.finditer(text):
        at = m.start()
        if level <= depth:
            out.append(text[start:at])
        if m.group() == "<":
            level += 1
            if level == depth + 1:
                out.append("<" + FOLD)
            elif level <= depth:
                out.append("<")
        else:
            level -= 1
            if level <= depth:
                out.append(">")
        start = at + 1
    if level <= depth:
        out.append(text[start:])
    return "".join(out)


_SOURCE_NAME = re.compile(r"(\d+)")
_NAME_PREFIX = re.compile(r"_Z(?:N[rVKRO]*)?")


def nested_name(name: str) -> str | None:
    """The qualified name at the head of a mangled symbol, read without a demangler:
    ``_ZN7sgl_hip10activation18act_and_mul_kernelI...`` -> ``sgl_hip::activation::act_and_mul_kernel<…>``
    (template arguments folded). None when the head is not plain source names (``<length><name>``)."""
    if name.startswith("__Z"):
        name = name[1:]
    prefix = _NAME_PREFIX.match(name)
    if prefix is None:
        return None
    nested = prefix.group().startswith("_ZN")
    pos, parts = prefix.end(), []
    if nested and name.startswith("St", pos):
        parts.append("std")
        pos += 2
    while True:
        digits = _SOURCE_NAME.match(name, pos)
        if digits is None:
            break
        length = int(digits.group())
        start = digits.end()
        part = name[start:start + length]
        if length == 0 or len(part) < length or not part.replace("_", "a").isalnum():
            return None
        parts.append(part)
        pos = start + length
        if not nested:
            break
    if not parts or pos >= len(name) or (nested and name[pos] not in "IE"):
        return None  # cut short, or a part this reading does not know (constructors, operators)
    text = "::".join(parts)
    return text + "<" + FOLD + ">" if name.startswith("I", pos) else text


@lru_cache(maxsize=65536)
def short_name(name: str, depth: int = 1, limit: int = 90) -> str:
    """A readable short form of a (demangled) name; see the module docstring. ``depth=None``-like
    large values keep every template argument (for a name no demangler reads: the name itself)."""
    text = demangle(name)
    if text == name and name.startswith(("_Z", "__Z")) and depth < 8:
        fallback = nested_name(name)
        if fallback is not None:
            return fallback if len(fallback) <= limit else fallback[:limit - 1] + FOLD
    if text == name and not (name.startswith("void ") or ("<" in name and "::" in name)):
        return text if len(text) <= limit else text[:limit - 1] + FOLD  # not a C++ symbol
    if not _balanced(text):  # operator<, lambdas with odd text: only cut
        return text if len(text) <= limit else text[:limit - 1] + FOLD
    split = _split_top(text)
    if split is not None and split[0] and not split[0].endswith(("operator", "}")):
        text = split[0]
    text = _drop_return_type(_CALL_OPERATOR.sub("", text))
    text = _unqualify(text)
    text = _fold_parameters(text)
    text = _fold(text, depth)
    text = text.replace(" >", ">")
    return text if len(text) <= limit else text[:limit - 1] + FOLD


def short_names(names: list[str], limit: int = 90) -> list[str]:
    """Short forms of ``names``; names whose short forms collide get more template depth, then a cut
    in the middle instead of the end, so distinct names read distinctly."""
    out = [short_name(n, 1, limit) for n in names]
    for depth in (2, 3, 8, None):
        seen: dict[str, int] = {}
        for s in out:
            seen[s] = seen.get(s, 0) + 1
        clash = [i for i, s in enumerate(out) if seen[s] > 1 and demangle(names[i]) != s]
        if not clash:
            break
        for i in clash:
            if depth is None:  # keep both ends: kernels often differ in their last parameters
                text = short_name(names[i], 8, 10**6)
                half = (limit - 1) // 2
                out[i] = text if len(text) <= limit else text[:half] + FOLD + text[-half:]
            else:
                out[i] = short_name(names[i], depth, limit)
    return out
