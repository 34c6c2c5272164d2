"""A reduced translation unit: the preprocessed TU with only what the captured kernel
needs left for the device compiler to instantiate and compile.

A big CUDA file is slow to recompile because its host code (launchers, dispatch
switches) instantiates every kernel template (ggml's mmvq.cu: 294 kernels), and the
device compile instantiates, optimizes and assembles all of them. The reduction works
on the preprocessed text (`gcc -E` output, device macros defined, so `__global__` reads
`__attribute__((global))`) and touches only the user's own files (the reproducer's
source/ copies; system and library headers are left alone):

- the bodies of host-only functions are blanked (host code never reaches the device
  compile's output, but its kernel launches make the front end instantiate kernels),
  except constexpr/consteval functions (usable in device code and constant
  expressions) and functions with a deduced return type;
- the bodies of other non-template kernels are blanked (they stay, empty, in the
  module);
- the captured kernel, declarations, types and module globals are kept as they are;
  device, host-device, constexpr and template functions too when kept code names them
  (`_Reducer.prune`, transitively), else their bodies go (a template's whole definition);
- namespace-scope static_asserts go (no code, and they would keep what they name);
- the captured template instance is instantiated explicitly at the end
  (kerncap.recompile.devcompile.instantiate).

Blanked bodies keep their newlines, so diagnostics point at the user's lines. The
device code that remains is the captured kernel's own, so the kernel compiles to the
same code (checked by the tests: identical `.text` to the full compile's). When the text
cannot be followed (unbalanced braces, a statement where a declaration belongs),
`ReduceError` says why and the caller compiles the whole TU.
"""

from __future__ import annotations

import re
from collections import Counter
from dataclasses import dataclass

# What the scan must step over as a whole, then the punctuation it follows. Numbers are
# matched only when they hold a digit separator (1'000), which would otherwise open a
# character literal; the others never reach Python (a ggml config table is mostly numbers).
# The lookahead lets the regex engine pass other characters at once (half the time).
_LITERALS = r"""(?P<dir>\n[ \t]*\#[^\n]*)                            # directive left by gcc -E (#pragma)
      | (?P<raw>(?<!\w)(?:u8|[uUL])?R"(?P<delim>[^ ()\\\t\n]{0,16})\()  # raw string start
      | (?P<str>"(?:[^"\\\n]|\\.)*")
      | (?P<num>(?<![\w.])\.?\d[\w.]*(?:[eEpP][+-][\w.]*)*'(?:[\w.]|'(?=\w)|[eEpP][+-])*)
      | (?P<chr>'(?:[^'\\\n]|\\.)*')"""
_TOKEN = re.compile(r"(?=[\n\"'{}();<%\d.uULR])(?:" + _LITERALS + r"| (?P<p>[{};()]|<%|%>))", re.X)
# Inside a function body only its braces matter.
_BODY_TOKEN = re.compile(r"(?=[\n\"'{}<%\d.uULR])(?:" + _LITERALS + r"| (?P<p>[{}]|<%|%>))", re.X)
_DEVICE = re.compile(r"__attribute__\s*\(\(\s*(?:__)?(device|global)(?:__)?\b")
_GLOBAL = re.compile(r"__attribute__\s*\(\(\s*(?:__)?global(?:__)?\b")
_ATTR = re.compile(r"__attribute__\s*\(\(|\[\[|\balignas\s*\(|__declspec\s*\(")
_KEEP_WORDS = re.compile(r"\b(constexpr|consteval)\b")
_STATEMENT = re.compile(r"^\s*(if|for|while|switch|catch|else|do|return|case|default|goto)\b")
_TRAILER = re.compile(r"\s*(const|volatile|noexcept|override|final|mutable|&&|&|try)\s*$")
_EXCEPTION_SPEC = re.compile(r"\b(noexcept|throw)$")
_NAMESPACE = re.compile(r"^\s*(inline\s+)?namespace\b[^=]*$", re.S)
_EXTERN_BLOCK = re.compile(r'^\s*extern\s*"C(\+\+)?"\s*$')
_CLASS = re.compile(r"\b(class|struct|union)\b")
_ENUM = re.compile(r"\benum\b")
_NAME_BEFORE = re.compile(r"(~?[A-Za-z_]\w*|operator\s*[^\w\s(]+|operator\s+\w[\w\s:<>*&]*|operator\s*\(\s*\))\s*$")


class ReduceError(Exception):
    """The preprocessed text could not be followed; the whole TU is compiled instead."""


@dataclass
class Reduction:
    text: str
    stubbed: int = 0  # function bodies blanked
    instantiation: str = ""
    instantiations_dropped: int = 0  # the user's explicit instantiations of kernels left out
    unused: int = 0  # bodies of device, constexpr and template functions nothing kept names, blanked
    asserts: int = 0  # namespace-scope static_asserts left out


@dataclass
class _Segment:
    start: int  # offset of the first character after the marker line
    end: int
    path: str
    line: int  # line number of the first line of the segment


def segments(text: str, wanted=None) -> list[_Segment]:
    """The stretches of `text` between gcc's line markers (`# 12 "file" 2`) whose file is
    `wanted` (all when None), with the line each starts at. Plain string operations: a
    thrust TU is 10 MB with 40,000 markers."""
    out: list[_Segment] = []
    current: tuple[int, str, int] | None = None  # (start, path, line) of the open stretch
    find = text.find
    pos = 0 if text.startswith("#") else find("\n#")
    while pos != -1:
        at = pos + 1 if text[pos] == "\n" else pos
        eol = find("\n", at)
        eol = len(text) if eol == -1 else eol
        head, _, rest = text[at + 1 : eol].lstrip(" \t").partition(" ")
        q1, q2 = rest.find('"'), rest.rfind('"')
        if head.isdigit() and 0 <= q1 < q2:
            if current is not None:
                out.append(_Segment(current[0], max(current[0], at), current[1], current[2]))
            path = rest[q1 + 1 : q2]
            current = (eol + 1, path, int(head)) if wanted is None or wanted(path) else None
        pos = find("\n#", eol)
    if current is not None:
        out.append(_Segment(current[0], max(current[0], len(text)), current[1], current[2]))
    return out


def _skip_balanced(text: str, i: int, open_: str, close: str) -> int:
    """Index just after the group opening at text[i]."""
    depth = 0
    while i < len(text):
        c = text[i]
        if c == open_:
            depth += 1
        elif c == close:
            depth -= 1
            if depth == 0:
                return i + 1
        i += 1
    return i


def _strip_attributes(head: str) -> str:
    out, i = [], 0
    while True:
        m = _ATTR.search(head, i)
        if not m:
            out.append(head[i:])
            return "".join(out)
        out.append(head[i : m.start()])
        if m.group(0) == "[[":
            j = head.find("]]", m.end())
            i = len(head) if j < 0 else j + 2
        else:
            i = _skip_balanced(head, m.end() - 1, "(", ")")
        out.append(" ")


def _strip_template_headers(head: str) -> str:
    h = head.lstrip()
    while True:
        m = re.match(r"template\s*<", h)
        if not m:
            return h
        h = h[_skip_balanced(h, m.end() - 1, "<", ">") :].lstrip()


def _params_open(h: str) -> int | None:
    """Index of the `(` opening the parameter list of a function head `h`, or None if
    `h` does not end in a parameter list (plus trailers like const, noexcept, -> T)."""
    h = h.rstrip()
    # trailing return type: cut at the last top-level "->" after a ")"
    depth, arrow = 0, None
    for i, c in enumerate(h):
        if c in "([":
            depth += 1
        elif c in ")]":
            depth -= 1
        elif c == "-" and depth == 0 and h[i + 1 : i + 2] == ">" and h[:i].rstrip().endswith(")"):
            arrow = i
    if arrow is not None:
        h = h[:arrow].rstrip()
    while True:
        if h.endswith(")"):
            # noexcept(...)/throw(...) trailer, else the parameter list
            j = _match_open(h, len(h) - 1)
            if j is None:
                return None
            before = h[:j].rstrip()
            spec = _EXCEPTION_SPEC.search(before)
            if spec and before[: spec.start()].rstrip().endswith((")", "const", "volatile", "&")):
                h = before[: spec.start()].rstrip()
                continue
            return j
        m = _TRAILER.search(h)
        if not m:
            return None
        h = h[: m.start()].rstrip()


def _match_open(h: str, close: int) -> int | None:
    depth = 0
    for i in range(close, -1, -1):
        if h[i] == ")":
            depth += 1
        elif h[i] == "(":
            depth -= 1
            if depth == 0:
                return i
    return None


def _top_level_eq(h: str) -> bool:
    """A `=` outside parentheses/brackets that is not part of an operator name."""
    depth = 0
    for i, c in enumerate(h):
        if c in "([":
            depth += 1
        elif c in ")]":
            depth -= 1
        elif c == "=" and depth == 0:
            prev, nxt = h[i - 1 : i], h[i + 1 : i + 2]
            if (prev and prev in "=!<>+-*/%&|^") or nxt == "=":
                continue  # ==, !=, <=, +=, ...
            if re.search(r"\boperator\s*\S*$", h[:i]):
                continue
            return True
    return False


@dataclass
class _Function:
    name: str
    device: bool  # __device__ or __global__ (kept)
    kernel: bool
    template: bool
    keep: bool  # constexpr, deduced return type
    qualified: bool = False  # `A::f(...) {`: a member defined outside its class


def _function(head: str) -> _Function | None:
    """The function whose body the `{` after `head` opens, or None (a class, an
    initializer, an enum: not a function). A statement raises: the scan lost its place."""
    h = _strip_attributes(head)
    if _STATEMENT.match(h):
        raise ReduceError(f"a statement ({h.strip()[:40]!r}) where a declaration belongs")
    decl = _strip_template_headers(h)
    if _top_level_eq(decl):
        return None  # an initializer: `auto f = [](...) {`, `T x = T(...) {` is not a function
    j = _params_open(decl)
    if j is None:
        return None
    m = _NAME_BEFORE.search(decl[:j])
    if not m:
        return None
    deduced = re.search(r"\bauto\b", decl[:j]) is not None and "->" not in decl[j:]  # also decltype(auto)
    return _Function(
        name=m.group(1).strip(),
        device=_DEVICE.search(head) is not None,
        kernel=_GLOBAL.search(head) is not None,
        template=re.match(r"\s*template\s*<", h) is not None,
        keep=_KEEP_WORDS.search(decl[:j]) is not None or deduced,
        qualified=decl[: m.start()].rstrip().endswith("::"),
    )


def reduce_tu(text: str, is_user_file, kernel_name: str, keep_functions: frozenset[str] = frozenset(),
              instantiation: str = "") -> Reduction:
    """Blank what the captured kernel does not need in the user's files of the
    preprocessed TU `text`. `kernel_name` is the kernel's unqualified name (kept even
    when it is not a template), `keep_functions` names functions to keep whole (those
    enclosing a lambda or local type the kernel is instantiated with)."""
    segs = segments(text, is_user_file)
    if not segs:
        raise ReduceError("no code from the reproducer's source files in the preprocessed TU")
    r = _Reducer(text, kernel_name, keep_functions, bool(instantiation))
    for seg in segs:
        r.scan(seg)
    if r.skip or r.stack or r.parens:
        raise ReduceError("the reproducer's source ends inside a block (unbalanced braces)")
    unused = r.prune(segs, instantiation)
    out, last = [], 0
    for open_, close, replacement in sorted(r.edits):
        out.append(text[last:open_])
        out.append(replacement)
        last = close + 1
    out.append(text[last:])
    reduced = "".join(out)
    if instantiation:
        reduced += f'\n# 1 "{INSTANTIATION_FILE}"\n{instantiation}\n'
    return Reduction(reduced, len(r.edits) - r.dropped - unused - r.asserts, instantiation, r.dropped, unused, r.asserts)


INSTANTIATION_FILE = "<kerncap: explicit instantiation of the captured kernel>"


class _Reducer:
    def __init__(self, text: str, kernel_name: str, keep_functions: frozenset[str], instantiated: bool = False):
        self.text = text
        self.instantiated = instantiated  # kerncap appends the captured instance's explicit instantiation
        self.dropped = 0  # the user's explicit instantiations of kernels left out
        self.asserts = 0  # namespace-scope static_asserts left out
        self.kernel_name = kernel_name
        self.keep_functions = keep_functions
        self.edits: list[tuple[int, int, str]] = []  # (open brace, close brace, replacement), in order
        self.stack: list[str] = []  # "ns" | "class"
        self.skip = 0  # depth inside a function body or an initializer being passed over
        self.parens = 0
        self.body: tuple[int, _Function | None, _Segment] | None = None
        self.head_start: int | None = None
        self.gaps: list[tuple[int, int]] = []  # stretches of other files inside the current head
        self.last_end: int | None = None
        # namespace-scope functions kept by the scan: (where what may go starts (the head of a
        # template, else the body), open brace, close brace, name)
        self.kept: list[tuple[int, int, int, str]] = []
        self.declared: Counter[str] = Counter()  # names of namespace-scope function definitions

    def scan(self, seg: _Segment) -> None:
        text = self.text
        if self.head_start is None:
            self.head_start = seg.start
        elif self.last_end is not None and seg.start > self.last_end + 1:
            self.gaps.append((self.last_end, seg.start))  # a header of another file in between
        self.last_end = seg.end
        pos = seg.start
        while pos < seg.end:
            pos = self._scan_from(pos, seg)

    def _scan_from(self, pos: int, seg: _Segment) -> int:
        """Follow the tokens from `pos` until the scan enters or leaves a function body
        (the pattern changes) or passes a raw string; where to go on from."""
        text = self.text
        body = bool(self.skip)
        start = pos - 1 if pos and text[pos - 1] == "\n" else pos  # a directive on the first line
        for m in (_BODY_TOKEN if body else _TOKEN).finditer(text, start, seg.end):
            kind = m.lastgroup
            if kind == "delim" or kind == "raw":
                end = text.find(")" + (m.group("delim") or "") + '"', m.end())
                if end < 0:
                    raise ReduceError("unterminated raw string literal")
                return end + len(m.group("delim") or "") + 2
            if kind != "p":
                continue
            self.token({"<%": "{", "%>": "}"}.get(m.group("p"), m.group("p")), m.start(), seg)
            if bool(self.skip) != body:
                return m.end()
        return seg.end

    def token(self, tok: str, pos: int, seg: _Segment) -> None:
        if self.skip:
            if tok == "{":
                self.skip += 1
            elif tok == "}":
                self.skip -= 1
                if self.skip == 0:
                    self.close_body(pos)
                    self.reset_head(pos + 1)
            return
        if tok == "(":
            self.parens += 1
        elif tok == ")":
            self.parens = max(0, self.parens - 1)
        elif self.parens:
            return  # braces and semicolons inside parentheses: lambdas in default arguments, decltype(...)
        elif tok == ";":
            if not self.stack or self.stack[-1] == "ns":
                if self.instantiated:
                    self.drop_kernel_instantiation(pos)
                self.drop_static_assert(pos)
            self.reset_head(pos + 1)
        elif tok == "}":
            if not self.stack:
                raise ReduceError(f"unbalanced '}}' in {seg.path}")
            self.stack.pop()
            self.reset_head(pos + 1)
        elif tok == "{":
            head = _clean_head(self.head_text(pos))
            if _NAMESPACE.match(head) or _EXTERN_BLOCK.match(head):
                self.stack.append("ns")
                self.reset_head(pos + 1)
                return
            fn = _function(head)
            if fn is None and _CLASS.search(head) and not _ENUM.search(head) and not _top_level_eq(head):
                self.stack.append("class")
                self.reset_head(pos + 1)
                return
            self.skip = 1
            self.body = (pos, fn, seg, self.head_start)

    def drop_kernel_instantiation(self, semicolon: int) -> None:
        """Blank the declaration ending at `semicolon` when it explicitly instantiates a
        kernel: the reduced TU instantiates only the captured instance, and once (a second
        explicit instantiation of it is an error)."""
        if not _is_kernel_instantiation(self.head_text(semicolon)):
            return
        start = self.first_word(_TEMPLATE_WORD, self.head_start, semicolon)
        if start is None or any(b > start and a < semicolon for a, b in self.gaps):
            return  # it spans another file's code: left as it is
        self.edits.append((start, semicolon, _blanked_lines(self.text[start:semicolon]) + ";"))
        self.dropped += 1

    def other_code_in(self, start: int, end: int) -> bool:
        """Whether another file's code (more than line markers and directives) stands in
        text[start:end] of the current head."""
        return any(b > start and a < end and not _only_directives(self.text[a:b]) for a, b in self.gaps)

    def first_word(self, word: re.Pattern, start: int, end: int) -> int | None:
        """Where `word` first stands in text[start:end] outside a directive line."""
        text = self.text
        return next((m.start() for m in word.finditer(text, start, end)
                     if not text[text.rfind("\n", 0, m.start()) + 1 : m.start()].lstrip().startswith("#")), None)

    def drop_static_assert(self, semicolon: int) -> None:
        """Blank a namespace-scope `static_assert(...)`: it makes no code, the app's own
        build checked it, and what it names (a ggml layout's stride function) would keep
        whole overload sets from `prune`."""
        if not _STATIC_ASSERT.match(_clean_head(self.head_text(semicolon))):
            return
        start = self.first_word(_STATIC_ASSERT_WORD, self.head_start, semicolon)
        if start is None or self.other_code_in(start, semicolon):
            return
        self.edits.append((start, semicolon, _blanked_lines(self.text[start : semicolon + 1])))
        self.asserts += 1

    def head_text(self, pos: int) -> str:
        parts, start = [], self.head_start
        for a, b in self.gaps:
            if b <= start or a >= pos:
                continue
            parts.append(self.text[start:a])
            start = b
        parts.append(self.text[start:pos])
        return "".join(parts)

    def reset_head(self, pos: int) -> None:
        self.head_start = pos
        self.gaps = [g for g in self.gaps if g[1] > pos]

    def close_body(self, close: int) -> None:
        open_, fn, seg, head_start = self.body
        self.body = None
        if fn is None:
            return
        at_namespace = "class" not in self.stack
        if self.blank(fn):
            self.edits.append((open_, close, _blanked(self.text[open_ + 1 : close])))
        elif at_namespace and _prunable(fn, self):
            # a template's head is evaluated only when it is instantiated: from its first
            # `template` on, it goes with the body when nothing names the template (the
            # directives before it stay: a #pragma pack applies to what follows), unless
            # another file's code stands in it
            start = self.first_word(_TEMPLATE_WORD, head_start, open_) if fn.template else None
            whole = start is not None and not self.other_code_in(start, open_)
            self.kept.append((start if whole else open_, open_, close, fn.name))
            if whole:
                return
        if at_namespace:
            self.declared[fn.name] += 1  # the name in its own head, which stays

    def prune(self, segs: list[_Segment], instantiation: str) -> int:
        """Blank the bodies of the kept namespace-scope functions that no kept code names
        (by identifier, transitively from everything else the user's files keep): a ggml
        TU's tables of configurations and its other kernels' templates, which the front end
        would otherwise parse and check for nothing. The number blanked."""
        if not self.kept:
            return 0
        text = self.text
        # what the user's files keep outside function bodies: declarations, types, globals,
        # every head (a head may evaluate a constexpr function), each function's own name
        # in its head not counted
        holes = sorted([(a, b + 1) for a, b, _ in self.edits] + [(s, c + 1) for s, _, c, _ in self.kept])
        counts = Counter(_IDENT.findall(instantiation))
        counts.update(self.keep_functions)
        counts[self.kernel_name] += 1
        i = 0
        for seg in segs:
            pos = seg.start
            while i < len(holes) and holes[i][1] <= pos:
                i += 1
            j = i
            while j < len(holes) and holes[j][0] < seg.end:
                a, b = holes[j]
                if a > pos:
                    counts.update(_IDENT.findall(text, pos, a))
                pos = max(pos, b)
                j += 1
            if pos < seg.end:
                counts.update(_IDENT.findall(text, pos, seg.end))
        counts.subtract(self.declared)
        names = {n for n, c in counts.items() if c > 0}
        # and every name the other files use: a library template may call a user's
        # function by argument-dependent lookup (~50 ms for a 3.4-MB TU of ggml's headers)
        last = 0
        for seg in segs:
            names.update(_IDENT.findall(text, last, seg.start))
            last = seg.end
        names.update(_IDENT.findall(text, last))
        pending = self.kept
        while True:
            used = [k for k in pending if k[3] in names]
            if not used:
                break
            pending = [k for k in pending if k[3] not in names]
            for start, _, close, _ in used:
                names.update(_IDENT.findall(text, start, close))
        for start, open_, close, _ in pending:
            if start < open_:  # a template: the whole definition, its #pragma unroll too
                self.edits.append((start, close, _markers_only(text[start : close + 1])))
            else:
                self.edits.append((open_, close, _blanked(text[open_ + 1 : close])))
        return len(pending)

    def blank(self, fn: _Function) -> bool:
        if fn.keep or fn.name in self.keep_functions:
            return False
        if fn.kernel:
            return not fn.template and fn.name != self.kernel_name
        return not fn.device


_IDENT = re.compile(r"[A-Za-z_]\w*")
_STATIC_ASSERT = re.compile(r"\s*static_assert\s*\(")
_STATIC_ASSERT_WORD = re.compile(r"(?<!\w)static_assert\b")


def _prunable(fn: _Function, r: "_Reducer") -> bool:
    """A kept function whose body may go when nothing names it: not the captured kernel
    nor a function kept for its local types, not an operator, destructor or member
    defined outside its class (called without its name)."""
    name = fn.name
    return not (fn.qualified or name == r.kernel_name or name in r.keep_functions or name.startswith(("operator", "~")))


_EXPLICIT_INSTANTIATION = re.compile(r"^\s*template\s+(?!<)")
_TEMPLATE_WORD = re.compile(r"(?<!\w)template\b")


def _is_kernel_instantiation(head: str) -> bool:
    """`template __global__ void k<__half, 4>(...)` (an explicit instantiation
    definition of a kernel, `__global__` preprocessed to `__attribute__((global))`), not
    `extern template` nor a template declaration."""
    h = _clean_head(head)
    return _EXPLICIT_INSTANTIATION.match(h) is not None and _GLOBAL.search(h) is not None


def _only_directives(text: str) -> bool:
    """Nothing but line markers and directives (what stands between two stretches of one file)."""
    return all(not ln.strip() or ln.lstrip().startswith("#") for ln in text.split("\n"))


def _blanked_lines(text: str) -> str:
    """`text` as blank lines, keeping its line markers and directives (line numbers stay right)."""
    return "\n".join(ln if ln.lstrip().startswith("#") else "" for ln in text.split("\n"))


def _blanked(inner: str) -> str:
    """A body that does nothing, on as many lines as `inner`, keeping its line markers
    (gcc writes one after a run of blank lines, e.g. an `#if 0` block) so that the
    numbering of everything after it stays right."""
    lines = inner.split("\n")
    rest = [ln if _LINE_MARKER.match(ln) else "" for ln in lines[1:]]
    return "{ __builtin_unreachable(); " + "\n".join(["", *rest]) + "}" if rest else "{ __builtin_unreachable(); }"


_LINE_MARKER = re.compile(r'#[ \t]*\d+[ \t]+"')


def _markers_only(text: str) -> str:
    """`text` as blank lines but its line markers (no directive of it stays)."""
    return "\n".join(ln if _LINE_MARKER.match(ln) else "" for ln in text.split("\n"))


def _clean_head(head: str) -> str:
    """The head without directive lines (#pragma) and access labels."""
    lines = [ln for ln in head.split("\n") if not ln.lstrip().startswith("#")]
    return re.sub(r"\b(public|private|protected)\s*:(?!:)", " ", "\n".join(lines))
