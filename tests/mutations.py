"""The mutation check: break the engine on purpose, one mutation at a time, and show that
the CPU tests named for that behaviour fail. Run by hand or in CI, from the repository
root, with the suite's environment:

    PYTHONPATH=engine:. python3 tests/mutations.py [--only NAME ...] [--list]
    python3 tests/mutations.py --changed-since REF [--budget SECONDS]

Each mutation replaces one exact snippet of one file (which must occur exactly once) in
a scratch copy of the tree (the working tree is never touched), runs its test files
there (`pytest -x -q`, in the suite's random order), and counts it caught when they fail.
The unmutated copy must pass the same tests first, so a failure is the mutation's. The
copy's own engine is what runs: an editable install's import hook (which would import
the working tree instead) is taken out of every Python process the tests start.

`--changed-since REF` runs only the mutations a change can affect: those whose mutated
file, or one of whose test files (or a helper module a test file imports from tests/),
differs between the merge base of REF and HEAD and the working tree, and those added or
edited in this file since then. `--budget` stops starting mutations after that many
seconds (the ones left are named, not counted). Exit status 0 when every mutation run
was caught, 1 otherwise, 2 when the check itself cannot run (a snippet gone, the
unmutated tests failing, REF unknown). docs/testing.md shows a run.
"""

from __future__ import annotations

import argparse
import importlib.util
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
import types
from dataclasses import dataclass
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]


@dataclass(frozen=True)
class Mutation:
    name: str
    area: str
    path: str
    old: str
    new: str
    tests: tuple[str, ...]  # pytest arguments: files, optionally with -k


MUTATIONS = [
    # -- the four hollow tests of issue 27 -------------------------------------------------
    Mutation("guards: place() places nothing", "replay", "engine/kerncap/replay/va_guards.py",
             "    placed = []\n    for at in guards_for(spans):", "    placed = []\n    for at in []:",
             ("tests/test_va_guards.py",)),
    Mutation("guards: a taken address stops the placement", "replay", "engine/kerncap/replay/va_guards.py",
             "        if got in (None, _MAP_FAILED):\n            continue", "        if got in (None, _MAP_FAILED):\n            break",
             ("tests/test_va_guards.py",)),
    Mutation("workbench: restore does nothing", "workbench", "engine/kerncap/reproducer/history.py",
             '            repo.git.checkout(commit, "--", *paths)', "            paths.clear()",
             ("tests/tui/test_app.py", "-k", "restore")),
    Mutation("MCP/validate: a set is checked on its first member only", "validation", "engine/kerncap/session/sets.py",
             "        reports = [x for m in run.runs for x in m.validation.reproducers]\n",
             "        reports = [x for m in run.runs for x in m.validation.reproducers][:1]\n",
             ("tests/test_mcp_server.py", "-k", "reproducer_set")),
    Mutation("stack: the capture's GPU name is not filled in", "provenance", "engine/kerncap/core/stack.py",
             '        stack["gpu"]["name"] = manifest_gpu.get("name")', "        pass",
             ("tests/test_stack.py",)),
    # -- capture format ---------------------------------------------------------------------------
    Mutation("format: a payload's hash is not checked", "capture format", "engine/kerncap/reproducer/format.py",
             "        if xxhash.xxh64_hexdigest(data) != h:", "        if False:",
             ("tests/test_damaged_input.py",)),
    Mutation("schema: any chunk size is accepted", "capture format", "engine/kerncap/reproducer/schemas.py",
             '"chunk_size": Int(min=4096, max=1 << 28),', '"chunk_size": Int(),',
             ("tests/test_damaged_input.py",)),
    # -- validation -------------------------------------------------------------------------------
    Mutation("validate: byte-exact checks always pass", "validation", "engine/kerncap/replay/results.py",
             "            return self.mismatched_bytes == 0", "            return True",
             ("tests/test_differential.py",)),
    Mutation("compare: an infinity is within tolerance of a finite value", "validation",
             "engine/kerncap/core/dtypes.py",
             "        return True\n    return not (abs(actual - expected) <= atol + rtol * abs(expected))",
             "        pass\n    return not (abs(actual - expected) <= atol + rtol * abs(expected))",
             ("tests/test_compare_semantics.py",)),
    Mutation("compare: NaN never equals NaN", "validation", "engine/kerncap/core/dtypes.py",
             "        return not (math.isnan(actual) and math.isnan(expected))", "        return True",
             ("tests/test_compare_semantics.py",)),
    # -- store ------------------------------------------------------------------------------------
    Mutation("store: an object's hash is not checked", "store", "engine/kerncap/reproducer/store.py",
             "        if digest.hexdigest() != h:", "        if False:",
             ("tests/test_store.py",)),
    Mutation("store: hard-linked objects are read", "store", "engine/kerncap/reproducer/store.py",
             "        if not stat.S_ISREG(st.st_mode) or st.st_nlink != 1:", "        if not stat.S_ISREG(st.st_mode):",
             ("tests/test_store.py",)),
    Mutation("pack: --force does not replace an existing pack", "store", "engine/kerncap/reproducer/pack.py",
             "    if (out.exists() or out.is_symlink()) and not force:", "    if out.exists() or out.is_symlink():",
             ("tests/test_pack.py",)),
    # -- prune ------------------------------------------------------------------------------------
    Mutation("prune: pointers in memory are not followed", "prune", "engine/kerncap/prune/closure.py",
             '                        keep(index, f"pointer at region {region.id}+{offset:#x}" + (STORED_SUFFIX if n else ""),\n'
             "                             STORED if n else POINTERS)", "                        pass",
             ("tests/test_prune.py",)),
    Mutation("prune: a write no pointer reaches goes unnoticed", "prune", "engine/kerncap/prune/closure.py",
             "        unreached_written=[r for r in cap.regions if (r.written or r.pre != r.post) and r.id not in kept_set],",
             "        unreached_written=[],",
             ("tests/test_prune.py",)),
    Mutation("prune: a sequence's post-states are not scanned", "prune", "engine/kerncap/prune/closure.py",
             "    post = roots.post  # a sequence: post-states hold the pointers its launches stored",
             "    post = False",
             ("tests/test_sequence_prune.py",)),
    Mutation("prune: a sequence's copies and fills are not roots", "prune", "engine/kerncap/prune/roots.py",
             "        for start, length, role in _touched(st):", "        for start, length, role in []:",
             ("tests/test_sequence_prune.py",)),
    # -- sources ----------------------------------------------------------------------------------
    Mutation("sources: the first of several objects wins over the captured cubin's", "sources",
             "engine/kerncap/sources/discover.py",
             '            return same[0], "exact"', '            return cands[0], "exact"',
             ("tests/test_sources.py", "tests/test_sources_project.py")),
    # -- workbench --------------------------------------------------------------------------------
    Mutation("workbench: saves are not debounced", "workbench", "kerncap_tui/app.py",
             "        if self._debounce is not None:\n            self._debounce.stop()\n        self._debounce = self.set_timer",
             "        self._debounce = self.set_timer",
             ("tests/tui/test_app.py", "-k", "debounced")),
    Mutation("workbench: a replay that never answers is waited for", "workbench", "kerncap_tui/replay_limit.py",
             "    return api.open_session(root, replay_timeout=replay_timeout(), **options)",
             "    return api.open_session(root, **options)",
             ("tests/tui/test_replay_timeout.py",)),
    # -- issue 44: the survivors and weak kills of the audit (docs/testing.md) --------------------
    Mutation("validate: the perturbation seed is ignored", "validation", "engine/kerncap/replay/differential.py",
             "    fills = fills if fills is not None else plan.fills(options.seed, k)",
             "    fills = fills if fills is not None else plan.fills(0, k)",
             ("tests/test_differential.py", "-k", "seed")),
    Mutation("validate: the last region is not compared", "validation", "engine/kerncap/replay/native_session.py",
             "        specs = []\n        for item in self.items:", "        specs = []\n        for item in self.items[:-1]:",
             ("tests/test_differential.py",)),
    Mutation("compare: the tolerance is relative to the actual value", "validation", "engine/kerncap/core/dtypes.py",
             "    return not (abs(actual - expected) <= atol + rtol * abs(expected))",
             "    return not (abs(actual - expected) <= atol + rtol * abs(actual))",
             ("tests/test_compare_semantics.py",)),
    Mutation("compare: the mismatch map's tolerance is relative to the actual value", "validation",
             "engine/kerncap/core/dtypes.py",
             "        within = np.abs(a - e) <= atol + rtol * np.abs(e)", "        within = np.abs(a - e) <= atol + rtol * np.abs(a)",
             ("tests/test_compare_semantics.py",)),
    Mutation("significance: the bootstrap interval at the wrong quantile", "validation",
             "engine/kerncap/replay/significance.py",
             "    alpha = (1.0 - confidence) / 2", "    alpha = 1.0 - confidence",
             ("tests/test_significance.py", "-k", "coverage")),
    Mutation("history: a variant's id may be negative", "capture format", "engine/kerncap/reproducer/schemas.py",
             '"id": Int(min=0, max=1 << 31), "time"', '"id": Int(max=1 << 31), "time"',
             ("tests/test_history.py",)),
    Mutation("prune: a sequence's module globals' post-states are not scanned", "prune", "engine/kerncap/prune/roots.py",
             "    roots.items = _global_items(cap, True)", "    roots.items = _global_items(cap, False)",
             ("tests/test_sequence_prune.py", "-k", "global")),
    Mutation("prune: a sequence's host regions' post-states are not scanned", "prune", "engine/kerncap/prune/roots.py",
             "_host_items(cap, True) + roots.items", "_host_items(cap, False) + roots.items",
             ("tests/test_sequence_prune.py", "-k", "host_region")),
    Mutation("MCP: recompile and build lose the reduced mode", "front ends", "engine/kerncap/session/options.py",
             'BUILD_MODES = ("auto", "reduced", "full")', 'BUILD_MODES = ("auto", "full")',
             ("tests/test_session_parity.py", "-k", "compile_mode")),
    Mutation("build --json: `reused` renamed", "front ends", "engine/kerncap/session/session.py",
             '"reused": self.reused,', '"reused_cubin": self.reused,',
             ("tests/test_session_parity.py", "-k", "build_json")),
    Mutation("build: an error or inconclusive verdict exits 1", "front ends", "engine/kerncap/commands/build.py",
             'EXIT_FAILED if v.validation == "fail" else 3', "EXIT_FAILED",
             ("tests/test_session_parity.py", "-k", "exit_status")),
    Mutation("profile: the merged variance is one process's", "profile", "engine/kerncap/capture/profile.py",
             '                m["var"] += var', '                m["var"] = var',
             ("tests/test_profile_merge.py",)),
    Mutation("profile: the 90 % interval loses its z factor", "profile", "engine/kerncap/capture/profile.py",
             'half = Z90 * math.sqrt(m["var"])', 'half = math.sqrt(m["var"])',
             ("tests/test_profile_merge.py",)),
    Mutation("workbench: the Profile pane's x posts nothing", "workbench", "kerncap_tui/widgets/profile_pane.py",
             "            self.post_message(ExtractRequested(self.kernels[int(row_key.value)].name))",
             "            pass",
             ("tests/tui/test_app.py", "-k", "extract")),
    # -- issue 44's fresh audit: ten mutations chosen as a reviewer would (docs/testing.md) -------
    Mutation("build: a void timing keeps its validation verdict", "integrity", "engine/kerncap/session/session.py",
             "        if p.void:\n", "        if False:\n",
             ("tests/test_integrity.py",)),
    Mutation("compare: a void timing still gets a speedup interval", "integrity", "engine/kerncap/replay/significance.py",
             '            p.notes.append(f"timing VOID: {p.check.wrong()}; no speedup is reported")\n            continue\n',
             '            p.notes.append(f"timing VOID: {p.check.wrong()}; no speedup is reported")\n',
             ("tests/test_integrity.py", "-k", "void")),
    Mutation("timing check: a region the captured kernel varies in is never checked", "integrity",
             "engine/kerncap/replay/native_session.py",
             'if i in excluded or (spread is not None and not spread.get("dtype")):',
             "if i in excluded or spread is not None:",
             ("tests/test_differential.py", "-k", "varying_region")),
    Mutation("validate: an input the captured kernel left unchanged discriminates", "integrity",
             "engine/kerncap/replay/differential.py",
             "        return any(i.covered and i.changed_bytes for i in self.inputs)",
             "        return any(i.covered for i in self.inputs)",
             ("tests/test_integrity.py",)),
    Mutation("validate: a perturbed input's reference is the variant's own output", "integrity",
             "engine/kerncap/replay/differential.py",
             'ref = rc.request("reference", cubin=None, fills=fills', 'ref = rc.request("reference", cubin=cubin, fills=fills',
             ("tests/test_differential.py", "tests/test_integrity.py")),
    Mutation("compare: a significantly slower variant is the fastest significant", "significance",
             "engine/kerncap/replay/significance.py",
             " and p.interval.low > 1.0]", "]",
             ("tests/test_significance.py", "-k", "slower_variant")),
    Mutation("prune: keeping a region does not keep its aliases", "prune", "engine/kerncap/prune/closure.py",
             "for other in aliases.get(region.id, ()):", "for other in aliases.get(-1, ()):",
             ("tests/test_aliased_mappings.py",)),
    Mutation("unpack: a pack whose last entries are missing is accepted", "store", "engine/kerncap/reproducer/pack.py",
             "        missing = [*files, *blobs]", "        missing = []",
             ("tests/test_pack.py", "-k", "between_two")),
    Mutation("recompile: an include path is judged by the link, not by where it leads", "hostile input",
             "engine/kerncap/recompile/trust.py",
             "        real = os.path.realpath(path)\n", "        real = os.path.abspath(path)\n",
             ("tests/test_untrusted_recompile.py", "-k", "links_lead")),
    Mutation("workbench: the line filter lets control characters through", "workbench", "kerncap_tui/terminal.py",
             "        return _drop_controls(text)", "        return text",
             ("tests/tui/test_hostile_text.py",)),
    Mutation("check --apply: a recorded command runs without --trust", "hostile input", "engine/kerncap/fleet/check.py",
             "    if runnable and not trust:", "    if runnable and trust is None:",
             ("tests/test_check.py", "-k", "apply")),
    Mutation("check --apply: a recorded LD_PRELOAD reaches the app", "hostile input", "engine/kerncap/fleet/check.py",
             '            if isinstance(k, str) and (k in APP_ENV or k.startswith("TRITON_"))}',
             "            if isinstance(k, str)}", ("tests/test_check.py", "-k", "recorded_settings")),
    Mutation("check --apply: a winner that failed its replay check is applied anyway", "apply",
             "engine/kerncap/fleet/check.py", "        elif replayed not in (None, PASS):", "        elif False:",
             ("tests/test_check.py", "-k", "apply")),
    Mutation("apply: the outcome is not kept on the History row", "apply", "engine/kerncap/session/session.py",
             "        v = self.history.note_in_app(result.row, result.in_app(request.command))",
             "        v = self.history.get(result.row)",
             ("tests/test_check.py", "-k", "set")),
    # -- issue 44's second fresh audit: ten more, one per area, as a reviewer would (docs/testing.md) --
    Mutation("validate: a difference in a varying region of unknown dtype passes", "validation",
             "engine/kerncap/replay/differential.py",
             'status = "fail" if hard else "inconclusive" if bad else "pass"', 'status = "fail" if hard else "pass"',
             ("tests/test_differential.py", "tests/test_integrity.py")),
    Mutation("perturb: --keep is ignored by the plan", "perturbation", "engine/kerncap/replay/perturb.py",
             "plans.append(_decide(capture, s, set(keep), bounds))", "plans.append(_decide(capture, s, set(), bounds))",
             ("tests/test_perturb.py", "tests/test_differential.py", "-k", "keep")),
    Mutation("history: the best variant need not have passed", "history", "engine/kerncap/reproducer/history.py",
             'if v.id != 0 and v.validation == "pass" and v.median_ms is not None',
             "if v.id != 0 and v.median_ms is not None",
             ("tests/test_history.py", "tests/test_check.py")),
    Mutation("recompile: a sibling directory sharing the reproducer's name prefix counts as inside", "hostile input",
             "engine/kerncap/recompile/trust.py",
             'return path == root or path.startswith(root.rstrip("/") + "/")',
             'return path.startswith(root.rstrip("/"))',
             ("tests/test_untrusted_recompile.py", "-k", "beside")),
    Mutation("sequence.json: a launch may name the kernel one past the last", "capture format",
             "engine/kerncap/reproducer/sequence.py",
             'if l["kernel"] >= kernels:', 'if l["kernel"] > kernels:',
             ("tests/test_sequences.py", "-k", "edited_sequence")),
    Mutation("unpack: the chunks' bytes do not count against the limits", "store", "engine/kerncap/reproducer/pack.py",
             '    total += sum(b["size"] for b in index["blobs"])\n', "",
             ("tests/test_hostile.py", "-k", "gigabytes or limits_are")),
    Mutation("prune: a one-past-the-end pointer does not keep its region", "prune", "engine/kerncap/prune/closure.py",
             "hit = cand <= self.ends[below]", "hit = cand < self.ends[below]",
             ("tests/test_prune.py",)),
    Mutation("sets: the worst member is the fastest", "sets", "engine/kerncap/reproducer/buckets.py",
             "worst = min(range(len(speedups)), key=lambda i: speedups[i])",
             "worst = max(range(len(speedups)), key=lambda i: speedups[i])",
             ("tests/test_buckets.py", "tests/test_sets.py")),
    Mutation("apply --check: a launch the variant's run did not fingerprint goes unnoticed", "apply",
             "engine/kerncap/capture/apply.py",
             '        if f is None or g is None or f["hash"] != g["hash"] or f["bytes"] != g["bytes"]:',
             '        if f is not None and g is not None and (f["hash"] != g["hash"] or f["bytes"] != g["bytes"]):',
             ("tests/test_apply.py", "-k", "fewer_launches")),
    Mutation("MCP: an argument under its own MCP name (min_time_s, max_time_s) is dropped", "front ends",
             "engine/kerncap/frontends/render.py",
             "if _argument(option) not in arguments or option.name in more:",
             "if option.name not in arguments or option.name in more:",
             ("tests/test_verbs.py", "tests/test_session_parity.py", "-k", "new_verb_is_its or named_apart")),
    # -- the thirteenth session's fixes, each with the test that holds it -------------------
    Mutation("apply --check: the app's own differing runs blamed on the variant", "apply",
             "engine/kerncap/capture/apply.py",
             "        unsteady = first_difference(a, da.fingerprints())\n",
             "        unsteady = None\n",
             ("tests/test_apply.py", "-k", "no_verdict")),
    Mutation("unpack: the directories above -o are not made", "pack", "engine/kerncap/reproducer/pack.py",
             "        made = _missing_parents(out)", "        made = []",
             ("tests/test_pack.py", "-k", "directories_above")),
    Mutation("recompile: the app's in-tree include directories stay beside their copies", "recompile",
             "engine/kerncap/recompile/trust.py",
             "            if path in mapped:\n                out.add(text)",
             "            if path in mapped:\n                pass",
             ("tests/test_own_extraction.py", "-k", "dot_dot")),
    Mutation("extract: outside headers found through -I<src>/../include are left outside", "recompile",
             "engine/kerncap/recompile/selfcontained.py",
             "    return [os.path.normpath(os.path.join(cwd, w)) for w in words]",
             "    return [w if os.path.isabs(w) else os.path.normpath(os.path.join(cwd, w)) for w in words]",
             ("tests/test_own_extraction.py", "-k", "dot_dot")),
    Mutation("reduce: a library header's names keep no user function", "recompile",
             "engine/kerncap/recompile/devcompile/reduce.py",
             "            names.update(_IDENT.findall(text, last, seg.start))", "            pass",
             ("tests/test_devcompile.py", "-k", "nothing_kept_names")),
    Mutation("reduce: a dropped template leaves its #pragma unroll behind", "recompile",
             "engine/kerncap/recompile/devcompile/reduce.py",
             "self.edits.append((start, close, _markers_only(text[start : close + 1])))",
             "self.edits.append((start, close, _blanked_lines(text[start : close + 1])))",
             ("tests/test_devcompile.py", "-k", "nothing_kept_names")),
    Mutation("reduce: a function's name in a kept body keeps nothing", "recompile",
             "engine/kerncap/recompile/devcompile/reduce.py",
             "                names.update(_IDENT.findall(text, start, close))", "                pass",
             ("tests/test_devcompile.py", "-k", "nothing_kept_names")),
    Mutation("reduce: a directive on a stretch's first line is read as code", "recompile",
             "engine/kerncap/recompile/devcompile/reduce.py",
             '        start = pos - 1 if pos and text[pos - 1] == "\\n" else pos', "        start = pos",
             ("tests/test_devcompile.py", "-k", "literals")),
    # -- apply copies only the module globals the variant's code reaches (sixteenth session) ------
    Mutation("apply: every global is copied whatever the variant's build recorded", "apply",
             "engine/kerncap/capture/apply.py",
             "    if reach is None:\n        return target", "    if True:\n        return target",
             ("tests/test_ptx_reach.py",)),
    Mutation("apply: a reach record made for another cubin is believed", "apply",
             "engine/kerncap/reproducer/variants.py",
             'doc.get("cubin_sha256") != sha or ', "",
             ("tests/test_ptx_reach.py",)),
    Mutation("ptx reach: a global's initializer is not followed (a pointer to another global)", "apply",
             "engine/kerncap/recompile/devcompile/ptx_reach.py",
             "                items.setdefault(var.group(1), text[start : m.end()])",
             '                items.setdefault(var.group(1), "")',
             ("tests/test_ptx_reach.py",)),
    Mutation("ptx reach: the module's first statement hides a variable", "apply",
             "engine/kerncap/recompile/devcompile/ptx_reach.py",
             "            var = _VARIABLE.search(text, start, m.end())", "            var = _VARIABLE.match(text, start, m.end())",
             ("tests/test_ptx_reach.py",)),
    Mutation("cli: an error a signal's exception became in C code is a traceback", "interrupts",
             "engine/kerncap/cli.py",
             "        if not _RECEIVED:\n            raise", "        if True:\n            raise",
             ("tests/test_sigkill.py", "-k", "c_code")),
    # -- a third fresh audit: ten more, as a reviewer would plant them ----------------------------
    Mutation("compare: five rounds, the documented minimum, are refused", "significance",
             "engine/kerncap/replay/significance.py",
             "    if len(baseline) < MIN_ROUNDS:", "    if len(baseline) <= MIN_ROUNDS:",
             ("tests/test_significance.py", "-k", "minimum_round_count")),
    Mutation("validate DIR DIR: the report names seed 0, not the seed that drew the inputs", "validation",
             "engine/kerncap/replay/differential.py",
             "    return TrustReport(None if cubin is None else str(cubin), perturb, options.seed, reports)",
             "    return TrustReport(None if cubin is None else str(cubin), perturb, 0, reports)",
             ("tests/test_differential.py", "-k", "seed")),
    Mutation("build.json: an absolute translation unit is accepted", "capture format",
             "engine/kerncap/reproducer/schemas.py",
             '"tu": Str(pattern=r"(?!/)(?!.*(^|/)\\.\\.(/|$)).+", max_len=4096)',
             '"tu": Str(pattern=r"(?!.*(^|/)\\.\\.(/|$)).+", max_len=4096)',
             ("tests/test_damaged_input.py", "-k", "build_json or translation_unit")),
    Mutation("unpack: a pack lacking a chunk its manifest uses is accepted", "store",
             "engine/kerncap/reproducer/pack.py",
             "        if lacking:\n", "        if False:\n",
             ("tests/test_pack.py", "-k", "chunk")),
    Mutation("prune --no-validate -o: an output inside the reproducer is written", "prune",
             "engine/kerncap/prune/pruner.py",
             "    if out == root or root in out.parents:", "    if out == root:",
             ("tests/test_prune.py",)),
    Mutation("build: the timing skips the input after the one the captured kernel faulted on", "front ends",
             "engine/kerncap/session/session.py",
             'faulted = tuple(k for k, i in enumerate(report.inputs[1:]) if i.status == "baseline fault")',
             'faulted = tuple(k for k, i in enumerate(report.inputs) if i.status == "baseline fault")',
             ("tests/test_differential.py", "-k", "fault")),
    Mutation("MCP dump: a perturbation without a cubin writes no output", "front ends",
             "engine/kerncap/frontends/mcp_server.py",
             'chosen = states or (["pre", "post", "output", "expected"] if variant or perturbation else ["pre", "post"])',
             'chosen = states or (["pre", "post", "output", "expected"] if variant else ["pre", "post"])',
             ("tests/test_session_parity.py", "-k", "dump")),
    Mutation("profile: a process that timed none of a kernel's launches sets its minimum", "profile",
             "engine/kerncap/capture/profile.py",
             '            if timed is None or timed:\n                m["min_ns"]',
             '            if True:\n                m["min_ns"]',
             ("tests/test_profile_merge.py", "-k", "minimum or merge")),
    Mutation("recompile: a cicc outside the local toolkit runs without --trust", "hostile input",
             "engine/kerncap/recompile/trust.py",
             '        if kind in ("cicc", "ptxas"):', '        if kind == "ptxas":',
             ("tests/test_untrusted_recompile.py", "-k", "outside_the_local_toolkit and cicc")),
    Mutation("workbench: page up in the Mismatch map moves the cursor down", "workbench",
             "kerncap_tui/widgets/mismatch_pane.py",
             'Binding("pageup", "move(-8, 0)", "Page up", show=False)',
             'Binding("pageup", "move(8, 0)", "Page up", show=False)',
             ("tests/tui/test_mismatch_snapshots.py", "-k", "page")),
    Mutation("apply: the kernel speedup compares totals over different numbers of executions", "apply",
             "engine/kerncap/capture/apply.py",
             "    kernel_interval, notes = interval(_per_call(kern[0], calls[0]), _per_call(kern[1], calls[1])), []",
             "    kernel_interval, notes = interval(*kern), []",
             ("tests/test_apply.py", "-k", "set_time")),
    Mutation("apply --check: a check that compared nothing passes", "apply", "engine/kerncap/capture/apply.py",
             "        return (self.compared == 0 and self.files_compared == 0 and self.mismatch is None",
             "        return (False and self.files_compared == 0 and self.mismatch is None",
             ("tests/test_apply.py", "-k", "compared_nothing")),
    # -- a fourth fresh audit (fifteenth session): ten more, in areas no earlier audit touched ------
    Mutation("scratch: a scratch root open to other users is accepted", "hostile input", "engine/kerncap/core/fsio.py",
             "    if not stat.S_ISDIR(st.st_mode) or st.st_uid != os.getuid() or st.st_mode & 0o077:",
             "    if not stat.S_ISDIR(st.st_mode) or st.st_uid != os.getuid():",
             ("tests/test_sigkill.py", "-k", "others_may_enter")),
    Mutation("sweep: every variant failing its validation exits 3, not 1", "fleet", "engine/kerncap/fleet/sweep.py",
             "        if any(e.status == FAIL for e in self.variants):\n            return EXIT_FAILED",
             "        if any(e.status == FAIL for e in self.variants):\n            return EXIT_CANNOT_RUN",
             ("tests/test_sweep.py", "-k", "every_variant_fails")),
    Mutation("check --write-baseline: a regressed case's median becomes the baseline", "fleet",
             "engine/kerncap/fleet/check.py",
             "        if c.status == PASS and c.timing:", "        if c.timing:",
             ("tests/test_check.py", "-k", "regressed_median")),
    Mutation("triton: a config whose grid is unknown keeps the captured grid", "triton",
             "engine/kerncap/triton/configs.py",
             "    if cands and grids == {tuple(grid)} and all(c.grid for c in cands):",
             "    if cands and grids == {tuple(grid)}:",
             ("tests/test_triton_configs.py", "-k", "grid_the_hook")),
    Mutation("workbench: an in-app check that compared nothing shows as a plain run", "workbench",
             "kerncap_tui/widgets/history_pane.py",
             '    elif a.get("check") in ("unsteady", "nothing"):', '    elif a.get("check") == "unsteady":',
             ("tests/tui/test_apply_view.py", "-k", "compared_nothing")),
    Mutation("sources: a translation unit edited after its build stays exact", "sources",
             "engine/kerncap/sources/discover.py",
             "if entry.output is not None and tu.is_file() and tu.stat().st_mtime > entry.output.stat().st_mtime:",
             "if entry.output is None and tu.is_file() and tu.stat().st_mtime > entry.output.stat().st_mtime:",
             ("tests/test_sources.py", "-k", "edited_after")),
    Mutation("Source pane: the line table's file is not preferred among several definitions", "sources",
             "engine/kerncap/sources/locate.py",
             "(0 if _rel(h.file, source) in preferred else 1,", "(0 if str(h.file) in preferred else 1,",
             ("tests/tui/test_inspect_logic.py", "-k", "line_table_names")),
    Mutation("extract --device: a kernel that also ran on the chosen device is said never to", "selection",
             "engine/kerncap/capture/selection.py",
             "        if off and selection.device not in seen:", "        if off:",
             ("tests/test_selection.py", "-k", "chosen_device")),
    Mutation("pool: the least recently opened session is evicted, not the least recently used", "front ends",
             "engine/kerncap/session/pool.py",
             "            self._sessions.move_to_end(key)\n", "            pass\n",
             ("tests/test_mcp_server.py", "-k", "least_recently")),
    Mutation("CLI: a repeatable option's minimum is refused (--keep 0)", "front ends",
             "engine/kerncap/frontends/render.py",
             "option.minimum is not None and value < option.minimum:",
             "option.minimum is not None and value <= option.minimum:",
             ("tests/test_replay_cli.py", "-k", "keep_takes")),
    Mutation("reduce: nvcc's _INTERNAL_ qualifier stays in the captured instance's spelling", "recompile",
             "engine/kerncap/recompile/devcompile/instantiate.py",
             '    text = _FUNCTION_ADDRESS.sub(r"&\\1", _INTERNAL.sub("", text.replace(_ANON, "")))',
             '    text = _FUNCTION_ADDRESS.sub(r"&\\1", text.replace(_ANON, ""))',
             ("tests/test_devcompile.py", "-k", "instantiation_spelling or address_of")),
    Mutation("replay: a compiler constant is restored into a variant's same-numbered one", "replay",
             "engine/kerncap/recompile/devcompile/module_id.py",
             "        if compiler_constant(name):\n            out[name] = None\n        elif name in available:",
             "        if name in available:",
             ("tests/test_devcompile.py", "-k", "compilers_own")),
    Mutation("apply: the compiler's own constants are mirrored into the variant", "apply",
             "engine/kerncap/capture/apply.py",
             "    globals_ = [(g.name, g.size) for g in cap.globals if not compiler_constant(g.name)]",
             "    globals_ = [(g.name, g.size) for g in cap.globals]",
             ("tests/test_apply.py", "-k", "compilers_own")),
    # -- a fifth fresh audit, part a (sixteenth session): six in validation, timing, replay glue, profile, prune, sequences --
    Mutation("validate: the first run's difference from the capture is left out of the tolerance class", "validation",
             "engine/kerncap/replay/differential.py",
             "        with_first = checks + [c for c in first if against_capture and c.id == rid and c.mismatched_bytes]\n",
             "        with_first = checks\n",
             ("tests/test_differential.py", "-k", "covers_its_replays")),
    Mutation("compare: the fastest significant is the least fast of the faster variants", "significance",
             "engine/kerncap/replay/significance.py",
             "    return max(faster, key=lambda p: p.interval.speedup, default=None)",
             "    return min(faster, key=lambda p: p.interval.speedup, default=None)",
             ("tests/test_significance.py", "-k", "fastest_of_the_faster")),
    Mutation("replay: a variant's .launch.json shared memory is ignored", "replay",
             "engine/kerncap/replay/native_session.py",
             'if k in ("grid", "block", "shared_mem_bytes")}}', 'if k in ("grid", "block")}}',
             ("tests/test_replay_session_glue.py", "-k", "launch_json")),
    Mutation("profile: the grid is not of the process that spent the most time (best total not kept)", "profile",
             "engine/kerncap/capture/profile.py",
             '                m["best_total"] = total\n', "                pass\n",
             ("tests/test_profile_merge.py", "-k", "most_time_among or merge_sums")),
    Mutation("prune: a one-past-the-end pointer of the highest region does not keep it", "prune",
             "engine/kerncap/prune/closure.py",
             "(values <= np.uint64(self.high))", "(values < np.uint64(self.high))",
             ("tests/test_prune.py", "-k", "highest_region or one_past")),
    Mutation("sequence.json: a launch step on another stream than its launch is accepted", "capture format",
             "engine/kerncap/reproducer/sequence.py",
             "            if launches[s.launch].stream != s.stream:\n", "            if False:\n",
             ("tests/test_sequences.py", "-k", "edited_sequence")),
    # -- a fifth fresh audit, part b (sixteenth session): six in the History, session, CLI, MCP, apply and check code --
    Mutation("history: a best variant's cubin outside the reproducer is followed", "history",
             "engine/kerncap/reproducer/history.py",
             "        return path.is_relative_to(root.resolve()) and path.is_file()",
             "        return path.is_file()",
             ("tests/test_history.py", "-k", "outside_the_reproducer")),
    Mutation("build: a variant that crashes is recorded as a wrong answer, not an error", "front ends",
             "engine/kerncap/session/session.py",
             '        if any(i.status == "variant fault" for i in report.inputs):',
             "        if False:",
             ("tests/test_differential.py", "-k", "faults_only_on_a_perturbed")),
    Mutation("check CLI: --threshold is ignored", "fleet", "engine/kerncap/commands/check.py",
             "threshold_pct=args.threshold, ", "",
             ("tests/test_check.py", "-k", "threshold_given")),
    Mutation("MCP: a reproducer under a second --root is refused", "front ends",
             "engine/kerncap/frontends/mcp_server.py",
             "        if not any(resolved.is_relative_to(d) for d in self.dirs):",
             "        if not resolved.is_relative_to(self.dirs[0]):",
             ("tests/test_mcp_server.py", "-k", "every_root")),
    Mutation("apply --check: the app's own runs differing at the variant's launch is called a failure", "apply",
             "engine/kerncap/capture/apply.py",
             "self.mismatch is None or self.mismatch.launch >= self.unsteady.launch",
             "self.mismatch is None or self.mismatch.launch > self.unsteady.launch",
             ("tests/test_apply.py", "-k", "apps_own_runs_differ")),
    Mutation("check: a regressed median exits 0", "fleet", "engine/kerncap/fleet/check.py",
             "        if states & {FAIL, REGRESSED}:", "        if FAIL in states:",
             ("tests/test_check.py", "-k", "verdicts_baseline_and_regression")),
    # -- a fifth fresh audit, part c (sixteenth session): a freed region of a sequence, the
    # perturbed input's "proves little" note and the summary's canary count, the plan's
    # address test, a prune through a link
    Mutation("validate: a region a sequence freed differs from the capture as if polluted (runs raised)", "validation",
             "engine/kerncap/replay/differential.py",
             "c.mismatched_bytes and not c.excluded", "c.mismatched_bytes",
             ("tests/test_sequences.py", "-k", "freed_inside")),
    Mutation("validate: a region a sequence freed inside its window is judged", "validation",
             "engine/kerncap/replay/results.py",
             "        if self.excluded:\n            return True",
             "        if self.excluded == \"freed\":\n            return True",
             ("tests/test_sequences.py", "-k", "freed_inside")),
    Mutation("validate: the region a sequence allocated, not the one it freed, is left out", "validation",
             "engine/kerncap/replay/native_session.py",
             '        if is_region and item.sequence_state == "freed":',
             '        if is_region and item.sequence_state == "allocated":',
             ("tests/test_sequences.py", "-k", "freed_inside")),
    Mutation("validate: a perturbation's redrawn inputs count as changed outputs", "validation",
             "engine/kerncap/replay/differential.py",
             "    redrawn_only = {s.span.region for s in plan.perturbed} - written",
             "    redrawn_only = {s.span.region for s in plan.perturbed} & written",
             ("tests/test_differential.py", "-k", "proves_little")),
    Mutation("validate: the summary counts the canary input as perturbed too", "validation",
             "engine/kerncap/replay/differential.py",
             "    perturbed = len(covered) - captured - canary",
             "    perturbed = len(covered) - captured",
             ("tests/test_integrity.py", "-k", "canary_input_apart")),
    Mutation("perturb: a span with exactly the threshold of address words is redrawn", "perturbation",
             "engine/kerncap/replay/perturb.py",
             "    return int(inside.sum()) >= max(ADDRESS_WORDS, len(words) // 1000)",
             "    return int(inside.sum()) > max(ADDRESS_WORDS, len(words) // 1000)",
             ("tests/test_perturb.py", "-k", "threshold_of_address")),
    Mutation("prune: a reproducer named through a link has the link swapped, not its directory", "prune",
             "engine/kerncap/prune/pruner.py",
             "        root = root.resolve()  # swap the directory itself, not the link to it",
             "        root = root.absolute()  # swap the directory itself, not the link to it",
             ("tests/test_prune.py", "-k", "through_a_link")),
    # -- a fifth fresh audit, part e (sixteenth session): six in capture, the reproducer format, sources and trust --
    Mutation("sources: a Triton kernel's def is placed on the blank line above it", "sources",
             "engine/kerncap/sources/locate.py",
             'rf"^[ \\t]*def\\s+{re.escape(name)}', 'rf"^\\s*def\\s+{re.escape(name)}',
             ("tests/tui/test_inspect_logic.py", "-k", "kernel_site")),
    Mutation("extract: --dispatch N of a kernel that ran exactly N times is not called too few", "selection",
             "engine/kerncap/capture/extract.py",
             "    if max(matches) <= dispatch:", "    if max(matches) < dispatch:",
             ("tests/test_extract_errors.py", "-k", "one_past_the_last")),
    Mutation("profile table: a sampled total's +-% is the interval's whole width", "profile",
             "engine/kerncap/capture/profile_table.py",
             "    half = (k.total_hi_ns - k.total_lo_ns) / 2", "    half = k.total_hi_ns - k.total_lo_ns",
             ("tests/test_profile_table.py", "-k", "half_width")),
    Mutation("format: verify() checks no post-state chunk", "capture format",
             "engine/kerncap/reproducer/format.py",
             'for state, chunks in (("pre", item.pre), ("post", item.post)):',
             'for state, chunks in (("pre", item.pre),):',
             ("tests/test_damaged_input.py", "tests/test_pack.py", "tests/test_arrays.py")),
    Mutation("sources: build.json's arch drops the GPU's minor version (sm_86 recorded as sm_80)", "sources",
             "engine/kerncap/sources/attach.py",
             "        return int(cc[0]) * 10 + int(cc[1])", "        return int(cc[0]) * 10",
             ("tests/test_sources.py", "-k", "major_and_minor")),
    Mutation("recompile: the recorded toolkit's nvcc is passed over for the first local one", "recompile",
             "engine/kerncap/recompile/trust.py",
             "    if os.path.isabs(recorded):\n        same =", "    if False:\n        same =",
             ("tests/test_untrusted_recompile.py", "-k", "several_local")),
    Mutation("extract: a set's captures are taken in name order (capture-17 before capture-3)", "selection",
             "engine/kerncap/capture/assemble.py",
             'return sorted(found, key=lambda d: int(d.name[8:]) if d.name != "capture" else -1)',
             "return sorted(found)",
             ("tests/test_sets.py", "tests/test_extract_selection.py")),
    # -- a fifth fresh audit, part d (sixteenth session): five in the workbench (Profile's x, History, Mismatch, restore into Source, apply) --
    Mutation("workbench: a Profile row is keyed by its shown position, so x after a re-sort names another kernel", "workbench",
             "kerncap_tui/widgets/profile_pane.py",
             "        for i, k in shown:", "        for i, (_, k) in enumerate(shown):",
             ("tests/tui/test_app.py", "-k", "extract")),
    Mutation("workbench: History's cursor on the last row moves up one on every refresh", "workbench",
             "kerncap_tui/widgets/history_pane.py",
             "t.move_cursor(row=min(max(cursor, 0), len(variants) - 1))",
             "t.move_cursor(row=min(max(cursor, 0), len(variants) - 2))",
             ("tests/tui/test_app.py", "-k", "keeps_its_cursor")),
    Mutation("workbench: the Mismatch pane opens on the first item given, not the first failing one", "workbench",
             "kerncap_tui/widgets/mismatch_pane.py",
             "        self.maps = sorted(maps, key=lambda m: m.passed)", "        self.maps = list(maps)",
             ("tests/tui/test_mismatch_snapshots.py",)),
    Mutation("workbench: a restore leaves the editor showing the text it replaced", "workbench", "kerncap_tui/app.py",
             "            self.call_from_thread(pane.reload_if_open, pane.path)", "            pass",
             ("tests/tui/test_app.py", "-k", "restore")),
    Mutation("workbench: apply runs the app outside the directory its capture recorded", "apply",
             "kerncap_tui/inspect_actions.py",
             'return (tuple(command) if ok else ()), provenance.get("cwd") if isinstance(provenance.get("cwd"), str) else None',
             "return (tuple(command) if ok else ()), None",
             ("tests/tui/test_apply_view.py",)),
    # -- a sixth fresh audit, part f (sixteenth session): six in the session pool, a fusion's record, bucket
    # signatures, a sequence's variant cubin, the mismatch map's summary and a set's verdict --
    Mutation("pool: a session is evicted one early (max_resident - 1 kept resident)", "front ends",
             "engine/kerncap/session/pool.py",
             "                while len(self._sessions) > self.max_resident:",
             "                while len(self._sessions) >= self.max_resident:",
             ("tests/test_mcp_server.py",)),
    Mutation("fusion: the replaced launches' time leaves out the last of them", "sequences",
             "engine/kerncap/session/fusions.py",
             "    return fused[first], sum(captured[first:last + 1])",
             "    return fused[first], sum(captured[first:last])",
             ("tests/test_fusion_build.py",)),
    Mutation("buckets: a 1- or 2-byte scalar argument is shown as hex, not its value", "sets",
             "engine/kerncap/reproducer/buckets.py",
             "    if len(raw) in (1, 2, 4, 8):", "    if len(raw) in (4, 8):",
             ("tests/test_buckets.py",)),
    Mutation("sequence replay: a cubin defining only some of a module's launched kernels replaces it", "sequences",
             "engine/kerncap/replay/sequence_replay.py",
             "    modules = {m: path for m, kernels in launched.items() if kernels <= names}",
             "    modules = {m: path for m, kernels in launched.items() if kernels & names}",
             ("tests/test_sequences.py", "-k", "lacking_one")),
    Mutation("mismatch map: a period that stops short of the end is called every Nth", "validation",
             "engine/kerncap/replay/mismatch.py",
             "    return p if nonzero[0] < p and nonzero[-1] + p >= n else None",
             "    return p if nonzero[0] < p else None",
             ("tests/test_mismatch.py",)),
    Mutation("sets: a member's inconclusive validation is recorded as a fail", "sets",
             "engine/kerncap/session/sets.py",
             '        v = trust.verdict if trust is not None else "fail"',
             '        v = "fail"',
             ("tests/test_sets.py",)),
    # -- a sixth fresh audit, part g (sixteenth session): six in the fleet (fan-out, tasks), Triton's
    # records, the option declarations, the extraction's provenance and the fusion skeleton --
    Mutation("fan-out: --gpus N of a serial run is ignored (the replay runs on the default GPU)", "fleet",
             "engine/kerncap/fleet/fanout.py",
             "        return SerialFanout(gpu=chosen[0] if chosen else None)", "        return SerialFanout()",
             ("tests/test_fanout.py", "-k", "one_gpu_named")),
    Mutation("check/sweep: an inconclusive validation passes and is timed", "fleet",
             "engine/kerncap/fleet/tasks.py",
             '        elif report.verdict == "inconclusive":', "        elif False:",
             ("tests/test_check.py", "-k", "inconclusive_validation")),
    Mutation("triton: a hook launch sharing one pointer with the capture is taken as the captured launch", "triton",
             "engine/kerncap/triton/records.py",
             "        if ptrs and all(p in values for p in ptrs):",
             "        if ptrs and any(p in values for p in ptrs):",
             ("tests/test_triton_reproducer.py", "-k", "all_of_whose")),
    Mutation("options: an exclusive lower bound admits its bound (--replay-timeout 0, --max-time 0)", "front ends",
             "engine/kerncap/core/option.py",
             '(self.above, lambda v, b: v > b, ">")', '(self.above, lambda v, b: v >= b, ">")',
             ("tests/test_verbs.py", "-k", "sanitize_refuses")),
    Mutation("recompile: an own extraction whose include_dirs were edited since is still vouched for", "hostile input",
             "engine/kerncap/recompile/provenance.py",
             '_DIGESTED = ("kernel", "compile_command", "cwd", "source_root", "tu", "include_dirs")',
             '_DIGESTED = ("kernel", "compile_command", "cwd", "source_root", "tu")',
             ("tests/test_own_extraction.py", "-k", "vouches_for")),
    Mutation("fuse: a buffer read by one launch and written by a later one stays const in the skeleton", "sequences",
             "engine/kerncap/recompile/fusion.py",
             "                elif written and not b.written:", "                elif written and b.written is None:",
             ("tests/test_sequences.py", "-k", "one_launch_reads")),
    # -- a sixth fresh audit, part h (sixteenth session): six in the commands' handlers (unpack,
    # store), the verbs' and MCP's front ends, sequence.json's schema and its cross references --
    Mutation("unpack CLI: --max-bytes is ignored (the 1 TiB default used)", "store",
             "engine/kerncap/commands/unpack.py",
             "limits = api.UnpackLimits(max_bytes=args.max_bytes, max_ratio=args.max_ratio)",
             "limits = api.UnpackLimits(max_ratio=args.max_ratio)",
             ("tests/test_pack.py", "-k", "max_bytes_given")),
    Mutation("store CLI: --store S is ignored (the default store used)", "store",
             "engine/kerncap/commands/store.py",
             "    results = [api.store(p, args.store) for p in args.paths]",
             "    results = [api.store(p, None) for p in args.paths]",
             ("tests/test_stored.py", "tests/test_store.py", "tests/test_faults.py")),
    Mutation("sanitize verb: --tool is ignored (memcheck always runs)", "front ends",
             "engine/kerncap/frontends/verbs.py",
             '    return {"cubin": r.cubin, "tool": r.tool, "timeout": r.timeout}',
             '    return {"cubin": r.cubin, "timeout": r.timeout}',
             ("tests/test_verbs.py", "-k", "tool_named")),
    Mutation("MCP: an app's output tail keeps its first lines, not its last", "front ends",
             "engine/kerncap/frontends/mcp_server.py",
             "        del self.lines[:-APP_OUTPUT_LINES]", "        del self.lines[APP_OUTPUT_LINES:]",
             ("tests/test_mcp_server.py", "-k", "last_lines")),
    Mutation("sequence.json: a newer format_version is read as version 1", "capture format",
             "engine/kerncap/reproducer/schemas.py",
             '"format": Str(choices=("kerncap-sequence",)), "format_version": Int(min=1, max=1),',
             '"format": Str(choices=("kerncap-sequence",)), "format_version": Int(min=1),',
             ("tests/test_sequences.py", "-k", "edited_sequence")),
    Mutation("sequence.json: a module may name the global one past the manifest's last", "capture format",
             "engine/kerncap/reproducer/sequence.py",
             "            if g >= globals_count:", "            if g > globals_count:",
             ("tests/test_sequences.py", "-k", "edited_sequence")),
    # -- a seventh fresh audit, part k (sixteenth session): six in source discovery (the grep's
    # kernel macros, a mangled name's base without a demangler), the device compile (module ids,
    # nvcc's threaded dry run), the stack's cached look and the manifest's chunk lists --
    Mutation("grep: a kernel macro naming its kernel after a later parameter is read at its first", "sources",
             "engine/kerncap/sources/grep.py",
             "                macros[m.group(1)] = params.index(declared)", "                macros[m.group(1)] = 0",
             ("tests/test_sources.py", "-k", "later_parameter")),
    Mutation("names: without a demangler a nested kernel's base name is its outermost namespace", "sources",
             "engine/kerncap/sources/names.py",
             "    return parts[-1] if parts else None", "    return parts[0] if parts else None",
             ("tests/test_sources.py", "-k", "without_a_demangler")),
    Mutation("module id: names carrying several TUs' ids give one of them", "recompile",
             "engine/kerncap/recompile/devcompile/module_id.py",
             "    return next(iter(ids)) if len(ids) == 1 else None", "    return next(iter(ids), None)",
             ("tests/test_devcompile.py", "-k", "several_translation_units")),
    Mutation("phases: nvcc --threads' shell redirections reach the steps as arguments", "recompile",
             "engine/kerncap/recompile/devcompile/phases.py",
             "        line = _REDIRECTIONS.sub(\"\", raw[3:].strip())  # kerncap captures each step's output itself",
             "        line = raw[3:].strip()  # kerncap captures each step's output itself",
             ("tests/test_devcompile.py", "-k", "threaded_nvcc")),
    Mutation("stack: a look at the stack for one Python answers for another app's Python", "provenance",
             "engine/kerncap/core/stack.py",
             "    key = (uuid, index, python)", "    key = (uuid, index)",
             ("tests/test_stack.py", "-k", "answer_for_another")),
    Mutation("format: a region's post-state chunk list of the wrong length is accepted", "capture format",
             "engine/kerncap/reproducer/format.py",
             "                if len(r.pre) != n or len(r.post) != n:", "                if len(r.pre) != n:",
             ("tests/test_damaged_input.py", "-k", "fields_are_named")),
    # -- a seventh fresh audit, part j (sixteenth session): six in the session's verbs (validate's
    # plan, compare's confidence), api.open's order, apply's check verdict and timing, the recompile's arch --
    Mutation("validate: a session's second validation with another --keep reuses the first one's plan", "validation",
             "engine/kerncap/session/session.py",
             "        key = (tuple(r.keep), tuple(sorted(r.region_dtypes.items())))",
             "        key = (tuple(sorted(r.region_dtypes.items())),)",
             ("tests/test_differential.py", "-k", "keep")),
    Mutation("compare: --confidence is ignored (the interval at the default 99 %)", "significance",
             "engine/kerncap/session/session.py",
             "                                                confidence=r.confidence, inputs=inputs)",
             "                                                inputs=inputs)",
             ("tests/test_session_parity.py", "-k", "compare")),
    Mutation("api.open: the sequence order is ignored (streams always)", "front ends", "engine/kerncap/api.py",
             "        session.use_order(order)", "        pass",
             ("tests/test_mcp_sequences.py", "tests/test_sequences.py")),
    Mutation("apply --check: an output file that differs (--compare-output) passes when every launch matched", "apply",
             "engine/kerncap/capture/apply.py",
             "        return (self.mismatch is None and not self.output_files and self.unsteady is None",
             "        return (self.mismatch is None and self.unsteady is None",
             ("tests/test_apply.py",)),
    Mutation("apply timing: the launches substituted per run are the last run's (an as-is run's 0 after an even "
             "number of rounds)", "apply",
             "engine/kerncap/capture/apply.py",
             "            if substitute:\n                substituted = r.substituted",
             "            if True:\n                substituted = r.substituted",
             ("tests/test_apply.py",)),
    Mutation("recompile: a family-specific target (sm_100f) is compiled as plain sm_100", "recompile",
             "engine/kerncap/recompile/cuda.py",
             '    for suffix in ("a", "f"):', '    for suffix in ("a",):',
             ("tests/test_recompile.py", "-k", "arch")),
    # -- a sixth fresh audit, part i (sixteenth session): five in the workbench (m after a range, the
    # Source tree on another launch, a Log line written once shown, a superseded build, ncu's timeout) --
    Mutation("workbench: m after a marked range extends it instead of starting a new one", "workbench",
             "kerncap_tui/widgets/profile_pane.py",
             "        if old is not None and old[0] == old[1]:", "        if old is not None:",
             ("tests/tui/test_fusion_view.py", "-k", "m_after_a_marked_range")),
    Mutation("workbench: the Source tree stays on the first launch's kernel when another launch is selected",
             "workbench", "kerncap_tui/widgets/source_pane.py",
             "            tree.path, tree.display = source_dir, True", "            tree.display = True",
             ("tests/tui/test_sequence_view.py", "tests/tui/test_fusion_view.py", "-k",
              "follows_its_launch or fusion_open_in_source")),
    Mutation("workbench: a Log line written once the pane is shown wraps at the console's width", "workbench",
             "kerncap_tui/widgets/log_pane.py",
             "        self.write(text, width=self.wrapped_at or None)", "        self.write(text)",
             ("tests/tui/test_terminal.py", "-k", "logged_while")),
    Mutation("workbench: a build superseded by a newer one still records its row", "workbench",
             "kerncap_tui/app.py",
             "cancelled=lambda: worker.is_cancelled", "cancelled=lambda: False",
             ("tests/tui/test_sequence_view.py", "-k", "superseded")),
    Mutation("workbench: Nsight Compute runs unbounded by KERNCAP_TOOL_TIMEOUT", "workbench",
             "kerncap_tui/inspect_actions.py",
             "r = session.ncu(cubin, timeout=self.tool_timeout, cancel=cancel, progress=progress)",
             "r = session.ncu(cubin, cancel=cancel, progress=progress)",
             ("tests/tui/test_inspect.py", "-k", "hanging_ncu")),
    # -- an eighth fresh audit, part l (sixteenth session): six in lines no mutation had touched
    # (a saved comparison's inputs, an exact profile's untimed warning, a d2d copy's source as a
    # prune root, validate_once with a dtype alone, what the captured dispatch wrote, a dead server) --
    Mutation("compare: a saved comparison reloads as timed on the captured input only", "significance",
             "engine/kerncap/replay/significance.py",
             'list(d.get("notes", [])), int(d.get("inputs", 1)))', 'list(d.get("notes", [])))',
             ("tests/test_significance.py", "-k", "saved_comparison")),
    Mutation("profile: an exact-timed kernel is warned as having none of its launches timed", "profile",
             "engine/kerncap/capture/profile.py",
             "    untimed = [k for k in kernels if k.timed == 0]", "    untimed = [k for k in kernels if not k.timed]",
             ("tests/test_profile_merge.py", "tests/test_profile_run.py")),
    Mutation("prune: a sequence's device-to-device copy source is not a root", "prune", "engine/kerncap/prune/roots.py",
             '        if st.kind in ("d2d", "d2h"):', '        if st.kind == "d2h":',
             ("tests/test_sequence_prune.py", "-k", "device_to_device")),
    Mutation("validate_once: a dtype alone (no atol/rtol) compares byte-exact, not element-wise", "validation",
             "engine/kerncap/replay/native_session.py",
             "        tolerance = atol is not None or rtol is not None or dtype is not None",
             "        tolerance = atol is not None or rtol is not None",
             ("tests/test_differential.py", "-k", "dtype_alone")),
    Mutation("validate: what the captured dispatch wrote counts its regions only (not globals, host regions, arrays)",
             "integrity", "engine/kerncap/replay/differential.py",
             'for kind in ("regions", "globals", "host_regions", "arrays"):', 'for kind in ("regions",):',
             ("tests/test_replay_hostmem.py", "-k", "counts_its_host_regions")),
    Mutation("validate: a replay server that died under a perturbed input is an error, not a baseline fault",
             "validation", "engine/kerncap/replay/differential.py",
             'return kind == "died" or (kind == "cuda"', 'return (kind == "cuda"',
             ("tests/test_differential.py", "-k", "dies_under")),
    # -- an eighth fresh audit, part m (sixteenth session): six in the schemas (a set member's weight), MCP's
    # app output tail, the session's timing (the variant's program, the inputs after a faulted one), build's
    # --reduced and the Profile pane's filter --
    Mutation("set.json: a member's weight above 1 is accepted", "capture format",
             "engine/kerncap/reproducer/schemas.py",
             '"weight": Num(min=0.0, max=1.0), "bucket?": Opt(BUCKET)', '"weight": Num(min=0.0), "bucket?": Opt(BUCKET)',
             ("tests/test_sets.py", "-k", "weight")),
    Mutation("MCP: an app's output line split across two reads is cut in two", "front ends",
             "engine/kerncap/frontends/mcp_server.py",
             "        text = self._partial[stream] + data\n", "        text = data\n",
             ("tests/test_mcp_server.py", "-k", "split_across or last_lines")),
    Mutation("build: a variant's row records the captured cubin's timing (the first program, not the last)",
             "front ends", "engine/kerncap/session/session.py",
             "            p = c.programs[-1]\n", "            p = c.programs[0]\n",
             ("tests/test_session_parity.py", "-k", "build")),
    Mutation("build: the timing takes one input fewer for each the captured kernel faulted on", "front ends",
             "engine/kerncap/session/session.py",
             "usable = [k for k in range(r.inputs - 1 + len(r.skip)) if k not in r.skip][:r.inputs - 1]",
             "usable = [k for k in range(r.inputs - 1) if k not in r.skip][:r.inputs - 1]",
             ("tests/test_differential.py", "-k", "fault or rotates_over")),
    Mutation("build CLI: --reduced is ignored (auto, with its whole-unit fallback)", "front ends",
             "engine/kerncap/commands/build.py",
             'mode="full" if args.full else "reduced" if args.reduced else "auto")',
             'mode="full" if args.full else "auto")',
             ("tests/test_session_parity.py", "-k", "compile_mode")),
    Mutation("workbench: the Profile filter matches mangled names only (not the demangled name shown)", "workbench",
             "kerncap_tui/widgets/profile_pane.py",
             '            if needle in k.name.lower() or needle in (getattr(k, "demangled", "") or "").lower()\n',
             "            if needle in k.name.lower()\n",
             ("tests/tui/test_app.py", "-k", "filter_matches_the_demangled or extract")),
    # -- a ninth fresh audit, part n (sixteenth session): the replay server and client, timing rounds --
    Mutation("replay server: a fault of the captured cubin gets no capture hint (a variant's does)", "replay",
             "engine/kerncap/replay/server.py",
             "if self.session.current_key == self.session.captured_key else None)",
             "if self.session.current_key != self.session.captured_key else None)",
             ("tests/test_replay_server.py", "-k", "blamed_on_the_capture")),
    Mutation("replay server: a validate's per-region dtypes are dropped", "replay",
             "engine/kerncap/replay/server.py",
             "{int(k): v for k, v in (req.get(\"dtypes\") or {}).items()}).to_dict()",
             "{}).to_dict()",
             ("tests/test_differential.py", "-k", "dtype_alone_compares_element_wise")),
    Mutation("replay client: a timing's max_seconds does not extend its request's timeout", "replay",
             "engine/kerncap/replay/client.py",
             "limit = max(limit, float(req.get(\"max_seconds\") or 0) + DEFAULT_TIMEOUT)",
             "limit = limit",
             ("tests/test_replay_client.py", "-k", "max_seconds_on_top")),
    Mutation("replay client: the sequence order is not sent with open (streams always)", "replay",
             "engine/kerncap/replay/client.py",
             "req[\"sequence_order\"] = self.sequence_order",
             "pass",
             ("tests/test_replay_client.py", "-k", "sequence_order")),
    Mutation("replay client: replay(per_launch=True) does not ask for each launch's time", "replay",
             "engine/kerncap/replay/client.py",
             "more = {\"per_launch\": True} if per_launch else {}",
             "more = {}",
             ("tests/test_replay_client.py", "tests/test_sequences.py", "-k", "per_launch or records_the_sequence_and_its_launches")),
    Mutation("time_compare: the programs' order does not rotate from round to round", "significance",
             "engine/kerncap/replay/session_ops.py",
             "for j in [(j + done) % len(keys) for j in range(len(keys))]:",
             "for j in range(len(keys)):",
             ("tests/test_significance.py", "-k", "take_turns")),
    # -- a ninth fresh audit, part o (sixteenth session): six in running the app (its environment, the stderr
    # excerpt), the workspace's names, list's exit status, info's size line and profile --top 0 --
    Mutation("workspace: profiles saved in one second list the first taken as the newest", "workspace",
             "engine/kerncap/reproducer/workspace.py",
             'glob("*.json"), key=_taken_order, reverse=True)', 'glob("*.json"), reverse=True)',
             ("tests/test_workspace.py",)),
    Mutation("run: the app's own PYTHONPATH is replaced by kerncap's hooks directory", "capture",
             "engine/kerncap/capture/run.py",
             'out["PYTHONPATH"] = str(PYHOOKS_DIR) + (os.pathsep + existing if existing else "")',
             'out["PYTHONPATH"] = str(PYHOOKS_DIR)',
             ("tests/test_extract_run_app.py", "tests/test_cli.py", "tests/test_jobs.py")),
    Mutation("run: an error's stderr excerpt shows the first lines of the tail, not the last", "capture",
             "engine/kerncap/capture/run.py",
             "        tail = self.stderr_tail[-lines:]", "        tail = self.stderr_tail[:lines]",
             ("tests/test_extract_run_app.py", "-k", "stderr_excerpt")),
    Mutation("workspace: a second profile in the same second is named without .json (profiles() misses it)",
             "capture", "engine/kerncap/reproducer/workspace.py",
             'candidate = path.with_name(f"{path.stem}-{n}{path.suffix}")',
             'candidate = path.with_name(f"{path.stem}-{n}")',
             ("tests/test_workspace.py",)),
    Mutation("list: a reproducer with problems named on its row exits 0", "store",
             "engine/kerncap/commands/list.py",
             'damaged = any(r["error"] or r.get("payloads") not in (None, "ok") or r.get("problems") for r in rows)',
             'damaged = any(r["error"] or r.get("payloads") not in (None, "ok") for r in rows)',
             ("tests/test_list.py", "-k", "problem_named")),
    Mutation("info: the size line's ratio is stored/logical (0.3x smaller)", "store",
             "engine/kerncap/reproducer/info.py",
             "ratio = f\" ({sizes['logical'] / sizes['stored']:.1f}x smaller)\"",
             "ratio = f\" ({sizes['stored'] / sizes['logical']:.1f}x smaller)\"",
             ("tests/test_info.py", "-k", "size_line")),
    Mutation("profile table: --top 0 shows no kernel instead of all", "profile",
             "engine/kerncap/capture/profile_table.py",
             "    shown = result.kernels if top <= 0 else result.kernels[:top]",
             "    shown = result.kernels if top < 0 else result.kernels[:top]",
             ("tests/test_profile_table.py", "-k", "in_a_pipe")),
    # -- apply's check of outputs reached through a table of pointers (sixteenth session)
    Mutation("apply --check: outputs reached through a table are never named to the interposer", "apply",
             "engine/kerncap/capture/apply.py",
             "            if t.outputs or t.indirect:",
             "            if t.outputs:",
             ("tests/test_apply.py", "-k", "tables_output")),
    Mutation("apply: a pointer to an unwritten region in a table counts as an output", "apply",
             "engine/kerncap/capture/apply.py",
             "    targets = [r for r in cap.regions if r.id in written]",
             "    targets = list(cap.regions)",
             ("tests/test_apply.py", "-k", "tables_name")),
    Mutation("apply: table outputs are looked for (payloads read) when no --check compares them", "apply",
             "engine/kerncap/capture/apply.py",
             "    indirect = indirect_outputs(cap, written) if tables else []",
             "    indirect = indirect_outputs(cap, written)",
             ("tests/test_apply.py", "-k", "tables_name")),
    Mutation("apply --check: table outputs cut at MAX_INDIRECT pass without a word", "apply",
             "engine/kerncap/capture/apply.py",
             "    if job.target.indirect_left:",
             "    if False:",
             ("tests/test_apply.py", "-k", "tables_output")),
    # -- a tenth fresh audit (sixteenth session), part p: six in the replay's address plan (an alias group's
    # granularity), the typed spans' overlaps, the validate request's --keep, the mismatch map's baseline on a
    # perturbed input, the host ranges a device-backed range leaves, a set run's verdict --
    Mutation("plan: an alias group whose size is not a multiple of the granularity is mapped as one allocation",
             "replay", "engine/kerncap/replay/plan.py",
             "        elif any(r.base % granularity or r.size % granularity for r in members):",
             "        elif any(r.base % granularity for r in members):",
             ("tests/test_aliased_mappings.py", "tests/test_replay_plan.py")),
    Mutation("region types: typed spans that only touch count as overlapping", "perturbation",
             "engine/kerncap/replay/region_types.py",
             "            if merged and s.offset < merged[-1].end:",
             "            if merged and s.offset <= merged[-1].end:",
             ("tests/test_perturb.py", "tests/test_dtypes.py")),
    Mutation("requests: --keep without --perturb is accepted", "validation",
             "engine/kerncap/replay/requests.py",
             "        elif self.keep:\n",
             "        elif False:\n",
             ("tests/test_differential.py", "tests/test_replay_cli.py")),
    Mutation("mismatch map: the baseline of a perturbed input runs on the captured input", "validation",
             "engine/kerncap/replay/mismatch_ops.py",
             "            ns.session.fill(fills)\n        ns.session.run()\n        ns.session.keep_reference(items)",
             "            pass\n        ns.session.run()\n        ns.session.keep_reference(items)",
             ("tests/test_mismatch.py", "tests/test_arrays.py", "tests/test_compare_semantics.py")),
    Mutation("host memory: a host range restored in device memory is also mapped on the host", "replay",
             "engine/kerncap/replay/host_memory.py",
             "    return plan, [r for r in ranges if r.index not in device_backed], device_backed",
             "    return plan, ranges, device_backed",
             ("tests/test_replay_hostmem.py", "tests/test_small_fixtures.py")),
    Mutation("set run: a member that failed its validation leaves the set passed (exit 0)", "sets",
             "engine/kerncap/replay/set_run.py",
             "        return all(r.error is None and (r.validation is None or r.validation.passed) for r in self.runs)",
             "        return all(r.error is None for r in self.runs)",
             ("tests/test_sets.py",)),
    # -- a tenth fresh audit (sixteenth session), part q: arrays, sets, stored payloads, sequence variants,
    #    the payload check, the schema checker ------------------------------------------------------
    Mutation("arrays: a mipmapped array is replayed when any one of its levels was captured", "capture format",
             "engine/kerncap/reproducer/arrays.py",
             "m.level_arrays and all(k in captured for k in m.level_arrays)",
             "m.level_arrays and any(k in captured for k in m.level_arrays)",
             ("tests/test_arrays.py",)),
    Mutation("sets: a set inside a workspace keeps its chunks in reproducers/store", "sets",
             "engine/kerncap/reproducer/sets.py",
             'return root.parent.parent / "store" if root.parent.name == "reproducers" else root / "store"',
             'return root.parent / "store" if root.parent.name == "reproducers" else root / "store"',
             ("tests/test_sets.py",)),
    Mutation("hydrate: a blob file of the wrong length is left as it is", "store",
             "engine/kerncap/reproducer/stored.py",
             "if st is None or not stat.S_ISREG(st.st_mode) or st.st_size != n:",
             "if st is None or not stat.S_ISREG(st.st_mode):",
             ("tests/test_stored.py", "tests/test_arrays.py", "tests/test_store.py")),
    Mutation("sequence variant: modules may name the module one past the last", "sequences",
             "engine/kerncap/reproducer/sequence_variant.py",
             "if not key.isdigit() or int(key) >= len(sequence.modules):",
             "if not key.isdigit() or int(key) > len(sequence.modules):",
             ("tests/test_sequences.py", "-k", "edited_sequence")),
    Mutation("payloads: --verify skips the hashes of chunks held in the store", "capture format",
             "engine/kerncap/reproducer/payloads.py",
             "                out.in_store += 1\n                if verify:",
             "                out.in_store += 1\n                if False:",
             ("tests/test_arrays.py", "tests/test_damaged_input.py")),
    Mutation("schema: true and false pass as integers", "capture format",
             "engine/kerncap/core/schema.py",
             "self.ok = lambda v: type(v) is int and lo <= v <= hi",
             "self.ok = lambda v: isinstance(v, int) and lo <= v <= hi",
             ("tests/test_damaged_input.py", "tests/test_manifest_writer.py", "tests/test_sequence_units.py")),
    # -- a tenth fresh audit (sixteenth session), part r: six in the recompile's reading of a reproducer
    # (a link's target, the build record across processes, nvcc run as one step), Triton's signature
    # check, the compilation database's search and the confined tree --
    Mutation("recompile inputs: a link to a sibling directory sharing the reproducer's name prefix counts as inside",
             "recompile", "engine/kerncap/recompile/inputs.py",
             '    return path == root or path.startswith(root.rstrip("/") + "/")',
             '    return path == root or path.startswith(root.rstrip("/"))',
             ("tests/test_recompile_inputs.py", "-k", "sibling_sharing")),
    Mutation("build record: a cubin built with one --config is reused for another", "recompile",
             "engine/kerncap/recompile/built.py",
             "    return [fingerprint, mode, config]", "    return [fingerprint, mode]",
             ("tests/test_build_record.py",)),
    Mutation("devcompile: nvcc run as one step (recorded --keep-dir) skips the check of its cubin", "recompile",
             "engine/kerncap/recompile/devcompile/build.py",
             '    if req.accept is not None:\n        req.accept(data, "nvcc")\n', "",
             ("tests/test_untrusted_recompile.py", "-k", "one_step")),
    Mutation("triton: reordered arguments pass the signature check (compared as sets)", "triton",
             "engine/kerncap/triton/pinned.py",
             "    if not removed and not added and old != new:",
             "    if not removed and not added and set(old) != set(new):",
             ("tests/test_triton_reproducer.py", "-k", "reordered")),
    Mutation("sources: a compile_commands.json one level below build/ (build/Release) is not found", "sources",
             "engine/kerncap/sources/compdb.py",
             '                candidates.extend(sorted(child.glob("*/compile_commands.json")))  # build/Release/...\n', "",
             ("tests/test_sources.py", "-k", "one_level_below")),
    Mutation("confined tree: a path through .. reaches the directory above the tree", "store",
             "engine/kerncap/core/confined.py",
             '        if rel.name in ("", ".", "..") or rel.is_absolute():',
             '        if rel.name in ("", ".") or rel.is_absolute():',
             ("tests/test_confined_tree.py",)),
    # -- a tenth fresh audit (sixteenth session), part t: the modules issue 44's first audit mutated, on lines
    # none of the earlier mutations touch (validate's escalation, a void baseline, validate_once's default dtype,
    # the profile's timing, a memory operation's roots, MCP dump's seed) --
    Mutation("validate: replay unlike the capture with two identical runs is not run again (runs > 2)", "validation",
             "engine/kerncap/replay/differential.py",
             "if det.deterministic and det.capture_mismatch and runs >= 2:",
             "if det.deterministic and det.capture_mismatch and runs > 2:",
             ("tests/test_differential.py", "-k", "enough_to_run_again")),
    Mutation("compare: a captured cubin whose timing is void makes its variants' timings void too", "significance",
             "engine/kerncap/replay/significance.py",
             "            p.check = None\n", "            pass\n",
             ("tests/test_significance.py", "-k", "names_the_significant_variant")),
    Mutation("validate_once: the dtype given for regions of unknown type is ignored (float32)", "validation",
             "engine/kerncap/replay/native_session.py",
             'fallback = dt.normalize(default) if default else "float32"', 'fallback = "float32"',
             ("tests/test_differential.py", "-k", "reads_regions_of_unknown")),
    Mutation("profile: one sampled process makes the whole profile's timing sampled", "profile",
             "engine/kerncap/capture/profile.py",
             'timing="sampled" if timings == {"sampled"} else "exact",',
             'timing="sampled" if "sampled" in timings else "exact",',
             ("tests/test_profile_run.py", "-k", "every_process_sampled")),
    Mutation("prune: a memory operation starting inside a region, past its base, does not root it", "prune",
             "engine/kerncap/prune/roots.py",
             "i = max(bisect.bisect_right(self.bases, start) - 1, 0)", "i = bisect.bisect_left(self.bases, start)",
             ("tests/test_sequence_prune.py", "-k", "span_over_two_regions")),
    Mutation("MCP dump: the seed of a perturbed input is ignored (seed 0)", "front ends",
             "engine/kerncap/frontends/mcp_server.py",
             "seed=seed, dtype=dtype", "seed=0, dtype=dtype",
             ("tests/test_session_parity.py", "-k", "follows_its_seed")),
    # -- an eleventh fresh audit (sixteenth session), part s: dump, tensor layouts, compute-sanitizer, Nsight
    # Compute and the tool runner (modules no mutation had touched) --
    Mutation("dump: the free-space check counts one state per item, not each state asked", "dump",
             "engine/kerncap/replay/dump.py",
             "    need = sum(t.item.size + HEADER_ROOM for t in targets for _ in states)",
             "    need = sum(t.item.size + HEADER_ROOM for t in targets)",
             ("tests/test_mismatch.py", "-k", "free_space")),
    Mutation("dump: a perturbed input's default directory is the captured input's (no -pK)", "dump",
             "engine/kerncap/replay/dump.py",
             '        name += f"-p{perturbation}"', "        pass",
             ("tests/test_mismatch.py", "-k", "own_by_default")),
    Mutation("layouts: a typed argument at an offset into its region runs past the region's end", "dump",
             "engine/kerncap/replay/tensor_view.py",
             "        n = (item.size - p.region_offset) // dt.itemsize(dtype)",
             "        n = item.size // dt.itemsize(dtype)",
             ("tests/test_mismatch.py", "-k", "offset_into_its_region")),
    Mutation("sanitize: errors the tool counted but the parser could not read are clean (exit 0)", "tools",
             "engine/kerncap/replay/sanitize.py",
             "        return not self.errors and not (self.reported_count or 0)", "        return not self.errors",
             ("tests/test_inspect_tools.py", "-k", "parser_could_not_read")),
    Mutation("ncu: a stored report is reused for another --warmup", "tools",
             "engine/kerncap/replay/ncu.py",
             "                and self.warmup == warmup and self.flush_l2 == flush_l2",
             "                and self.flush_l2 == flush_l2",
             ("tests/test_inspect_tools.py", "-k", "same_warmup")),
    Mutation("tools: a tool in $CUDA_HOME/bin (not on PATH) is not found", "tools",
             "engine/kerncap/replay/tools.py",
             '    homes = [os.environ.get("CUDA_HOME"), os.environ.get("CUDA_PATH"), *DEFAULT_CUDA_HOMES]',
             '    homes = [os.environ.get("CUDA_PATH"), *DEFAULT_CUDA_HOMES]',
             ("tests/test_inspect_tools.py", "-k", "cuda_home_before")),
    # -- an eleventh fresh audit (sixteenth session), part u: the command-line verbs (replay's comparison,
    # validate of several reproducers, extract's selection, --ncu's warm-up), a sequence's arguments, a set's
    # weights --
    Mutation("replay --compare: without -n each program times a replay's 20 launches per round, not 10", "replay",
             "engine/kerncap/commands/replay.py",
             "iterations=_or(args.iterations, api.options.COMPARE_ITERATIONS)",
             "iterations=_or(args.iterations, api.options.REPLAY_ITERATIONS)",
             ("tests/test_significance.py", "-k", "names_the_significant_variant")),
    Mutation("validate: two DIRs are checked on the first only (len(paths) > 2)", "validation",
             "engine/kerncap/commands/validate.py",
             "    if len(args.paths) > 1:\n", "    if len(args.paths) > 2:\n",
             ("tests/test_replay_cli.py", "-k", "two_reproducers")),
    Mutation("extract: --device is dropped from the selection", "selection",
             "engine/kerncap/commands/extract.py",
             "                              device=args.device)", "                              device=None)",
             ("tests/test_extract_selection.py", "-k", "flags_reach_the_app")),
    Mutation("replay --ncu: --warmup ignored (3 launches always skipped)", "inspect tools",
             "engine/kerncap/commands/inspect_tools.py",
             "warmup=3 if args.warmup is None else args.warmup", "warmup=3",
             ("tests/test_inspect_tools.py", "-k", "warmup_asked")),
    Mutation("extract: --until without --sequence is silently ignored", "sequences",
             "engine/kerncap/capture/sequence_extract.py",
             "        if count is not None or until:", "        if count is not None:",
             ("tests/test_sequences.py", "-k", "refuses_what_does_not_make")),
    Mutation("set extract: two members of one bucket each get the bucket's whole share", "sets",
             "engine/kerncap/capture/set_extract.py",
             "return [shares[k] / keys.count(k) for k in keys]", "return [shares[k] for k in keys]",
             ("tests/test_sets.py", "-k", "one_bucket_share")),
    # -- an eleventh fresh audit (sixteenth session), part w: Triton's compile worker, the
    # kernel module's sanitizer, the in-app hooks (post-import patching, the recorder's
    # dispatch limit) and the device-code readers (fat binaries, cubin line tables) --------
    Mutation("triton record: a set's dispatch list records launches only up to its first member", "triton",
             "engine/kerncap/pyhooks/_kerncap_triton_record.py",
             "self.limit = max(int(x) for x in", "self.limit = min(int(x) for x in",
             ("tests/test_triton_hook.py", "-k", "up_to_its_last_member")),
    Mutation("hooks: a module imported before the hooks install is never patched", "triton",
             "engine/kerncap/pyhooks/_kerncap_hooks.py",
             'getattr(module, "__spec__", None) is not None and not _initialising(module):',
             'getattr(module, "__spec__", None) is not None and _initialising(module):',
             ("tests/test_triton_hook.py", "-k", "patched_at_once")),
    Mutation("fatbin: a section's fat binaries after the first are skipped", "sources",
             "engine/kerncap/sources/fatbin.py",
             "        pos = end\n", "        pos = len(blob)\n",
             ("tests/test_sources_project.py", "-k", "linked_section")),
    Mutation("cubin: a kernel's line-table files include every kernel's of its cubin", "sources",
             "engine/kerncap/sources/cubin.py",
             "if owners is None or (seq < len(owners) and owners[seq] == kernel):",
             "if owners is None or seq < len(owners):",
             ("tests/test_sources_project.py", "-k", "own_line_table")),
    Mutation("triton: a kernel rebuilt from its function's source alone lands one line late", "triton",
             "engine/kerncap/triton/kernel_source.py",
             'pad = max(0, (first_line or 0) - 1 - header.count("\\n"))',
             'pad = max(0, (first_line or 0) - header.count("\\n"))',
             ("tests/test_triton_reproducer.py", "-k", "keeps_its_line_numbers")),
    Mutation("triton worker: a recompile's --config is not sent to the warm worker", "triton",
             "engine/kerncap/triton/worker.py",
             'self._child.send({"op": "recompile", "config": config})',
             'self._child.send({"op": "recompile", "config": None})',
             ("tests/test_triton_worker.py", "-k", "pinned_config_reaches")),
    # -- an eleventh fresh audit (sixteenth session), part x: shipping to workers, units,
    # listing, editable sources, a sequence's --kernel, a set's source sync ---------------------
    Mutation("ship: a bundle's digest covers its paths, not their contents (an edited reproducer reuses the cache)",
             "fleet", "engine/kerncap/fleet/ship.py",
             'h.update(rel.encode() + b"\\0" + hashlib.sha256(data).digest())', 'h.update(rel.encode() + b"\\0")',
             ("tests/test_check.py", "-k", "edited_since")),
    Mutation("units: a size argument (--max-bytes 40G) read in decimal multiples", "hostile input",
             "engine/kerncap/core/units.py",
             '    return int(float(m.group(1)) * 1024 ** "_kmgtp"',
             '    return int(float(m.group(1)) * 1000 ** "_kmgtp"',
             ("tests/test_pack.py", "-k", "max_bytes_given")),
    Mutation("list: a killed kerncap's staging copy is listed as a reproducer", "workspace",
             "engine/kerncap/reproducer/listing.py",
             "        if is_leftover_name(p.name):\n            continue", "        if False:\n            continue",
             ("tests/test_sigkill.py", "-k", "killed_prune_swap")),
    Mutation("sources: a file under a hidden directory of source/ counts as a source", "workbench",
             "engine/kerncap/reproducer/editable.py",
             "    parts = p.parts if root is not None else (p.name,)", "    parts = (p.name,)",
             ("tests/test_mcp_server.py", "-k", "hidden_directory")),
    Mutation("sequence: --kernel N one past the last kernel taken as an index (`<` -> `<=`)", "sequences",
             "engine/kerncap/recompile/sequence_kernel.py",
             "int(selector) < len(seq.kernels)", "int(selector) <= len(seq.kernels)",
             ("tests/test_sequences.py", "-k", "one_past_the_last")),
    Mutation("set recompile: the set's source written through a link in a member's source/", "hostile input",
             "engine/kerncap/recompile/set_variant.py",
             "            if dst.is_symlink():\n                dst.unlink()\n            elif",
             "            if False:\n                dst.unlink()\n            elif",
             ("tests/test_sets.py", "-k", "link_in_a_member")),
    # the engine bug part x found beside that survivor (a linked directory of a member, fixed)
    Mutation("set recompile: the set's source written through a member's linked source directory", "hostile input",
             "engine/kerncap/recompile/set_variant.py",
             "            dst = real_dir(s.root, rel.parent, create=True) / rel.name",
             "            dst = make_dirs(s.root / rel.parent) or s.root / rel",
             ("tests/test_sets.py", "-k", "link_in_a_member or linked_directory")),
    # -- a twelfth fresh audit (sixteenth session), part y: the workbench's memory map and region
    # table, the history plot, the source watcher, the extract and fuse dialogs (before: 5 of 6
    # survived; the fuse dialog's was caught) -------------------------------------------------------
    Mutation("memory map: a window zoomed on the last region runs past the map's end", "workbench",
             "kerncap_tui/widgets/memory_map.py",
             "        first = min(max(0, at - width // 3), total - width)",
             "        first = max(0, at - width // 3)",
             ("tests/tui/test_inspect_logic.py",)),
    Mutation("regions: the region table lists host regions after every device region, not by address", "workbench",
             "kerncap_tui/regions.py",
             "    rows.sort(key=lambda r: r.base)\n", "",
             ("tests/tui/test_inspect_logic.py", "tests/tui/test_logic.py")),
    Mutation("history plot: the y scale leaves out the fastest runs (their lines clamp at the bottom)", "workbench",
             "kerncap_tui/widgets/history_plot.py",
             "    values = [v.median_ms for v in shown] + [v.min_ms for v in shown if v.min_ms]",
             "    values = [v.median_ms for v in shown]",
             ("tests/tui/test_inspect_logic.py",)),
    Mutation("watcher: a save by rename onto a source (the editor's temp file moved) is not seen", "workbench",
             "kerncap_tui/watcher.py",
             '                path = getattr(event, "dest_path", "") or event.src_path\n                if is_source_event',
             '                path = event.src_path\n                if is_source_event',
             ("tests/tui/test_logic.py",)),
    Mutation("extract dialog: the dispatch index typed is ignored (dispatch 0 extracted)", "workbench",
             "kerncap_tui/screens/extract_screen.py",
             "output=output, dispatch=dispatch, **window)", "output=output, dispatch=0, **window)",
             ("tests/tui/test_sequence_view.py", "-k", "extract_dialog")),
    Mutation("fuse dialog: a fusion starting at the same launch offered as this range's own", "workbench",
             "kerncap_tui/screens/fuse_screen.py",
             'if (f["first"], f["last"]) == (self.first, self.last)]', 'if f["first"] == self.first]',
             ("tests/tui/test_fusion_view.py", "-k", "refusals")),
    # -- a twelfth fresh audit (sixteenth session), part z: the child protocol, the app's process
    # tree, a sequence's info text, the app's launch counts, sparse regions, recompile's configs ----
    Mutation("child: a JSON line that is no object taken for the child's reply", "replay",
             "engine/kerncap/core/child.py",
             "    if not isinstance(obj, dict):\n        raise ValueError", "    if obj is None:\n        raise ValueError",
             ("tests/test_child.py",)),
    Mutation("jobs: a reused pid (another start time) taken for one of the app's processes", "capture",
             "engine/kerncap/capture/jobs.py",
             "        return pid in table and table[pid][1] == self.known.get(pid)", "        return pid in table",
             ("tests/test_jobs.py",)),
    Mutation("info: a sequence whose window only frees a region does not say so", "sequences",
             "engine/kerncap/reproducer/sequence_text.py",
             '    if s.get("allocated") or s.get("freed"):', '    if s.get("allocated"):',
             ("tests/test_sequences.py", "-k", "info")),
    Mutation("launches: a short name several kernels share marks one of them captured", "capture",
             "engine/kerncap/reproducer/launches.py",
             "    return same[0] if len(same) == 1 else None", "    return same[0] if same else None",
             ("tests/test_extract_launches.py",)),
    Mutation("sparse: a region's partial last chunk counted whole", "replay",
             "engine/kerncap/replay/sparse.py",
             "        n = min(chunk_size, size - off)", "        n = chunk_size",
             ("tests/test_replay_hostmem.py",)),
    Mutation("recompile --list-configs ignores --json", "recompile",
             "engine/kerncap/commands/recompile.py",
             "session.autotune_configs(), args.reproducer, args.json)", "session.autotune_configs(), args.reproducer, False)",
             ("tests/test_triton_reproducer.py", "-k", "list_configs")),
    # -- a twelfth fresh audit (sixteenth session), part aa: the timed launches' check, the mismatch
    # map's request, the NVTX table's merge, the commands' argument types, the replay protocol's
    # errors, a set's info
    Mutation("launch check: a timed launch that left one byte unlike the expected state passes", "integrity",
             "engine/kerncap/replay/launch_check.py",
             "for k, (j, n) in enumerate(launches) if n]", "for k, (j, n) in enumerate(launches) if n > 1]",
             ("tests/test_integrity.py", "-k", "single_byte")),
    Mutation("mismatch map: perturbation K draws perturbation K+1's inputs", "validation",
             "engine/kerncap/replay/mismatch_request.py",
             "        fills = plan.fills(seed, perturbation - 1)", "        fills = plan.fills(seed, perturbation)",
             ("tests/test_mismatch.py", "-k", "same_input")),
    Mutation("profile --by-nvtx: a range's minimum merged as the largest of the processes' minima", "profile",
             "engine/kerncap/capture/nvtx_summary.py",
             "            m.min_ns = min(m.min_ns, lo)", "            m.min_ns = max(m.min_ns, lo)",
             ("tests/test_profile_run.py", "-k", "several_processes")),
    Mutation("arguments: a positive float accepts 0 (--timeout 0, --max-ratio 0)", "front ends",
             "engine/kerncap/commands/arguments.py",
             "    if not v > 0:", "    if v < 0:",
             ("tests/test_cli.py", "-k", "types_range")),
    Mutation("protocol: the server's own hint replaced by the kind's generic one", "replay",
             "engine/kerncap/replay/protocol.py",
             '    hint = resp.get("hint") or HINTS.get(kind)', "    hint = HINTS.get(kind)",
             ("tests/test_replay_client.py", "-k", "own_hint")),
    Mutation("info SET: payloads_ok when any member is complete", "sets",
             "engine/kerncap/reproducer/set_info.py",
             '"payloads_ok": all(r.get("payloads") == "ok" for r in members)}',
             '"payloads_ok": any(r.get("payloads") == "ok" for r in members)}',
             ("tests/test_sets.py", "-k", "missing_its_cubin")),
    # -- a thirteenth fresh audit (sixteenth session), part ab: the profile command's tables, NVML's
    # clock event reasons, a prune record read back, the list rows' typed fields, the capture
    # library's report, an error's text
    Mutation("profile --by-nvtx: the NVTX table ignores --top", "profile",
             "engine/kerncap/commands/profile.py",
             "            print_nvtx_table(result, top=args.top, wide=args.wide)",
             "            print_nvtx_table(result, wide=args.wide)",
             ("tests/test_profile_run.py", "-k", "follow_top")),
    Mutation("nvml: an NVML before 12 (throttle reasons) reports no clock event reasons", "provenance",
             "engine/kerncap/core/nvml.py",
             'for name in ("GetCurrentClocksEventReasons", "GetCurrentClocksThrottleReasons"):',
             'for name in ("GetCurrentClocksEventReasons",):',
             ("tests/test_nvml.py", "-k", "before_12")),
    Mutation("prune record: an unvalidated prune read back loses the pruned reproducer's path", "prune",
             "engine/kerncap/reproducer/prune_report.py",
             'output=Path(d["output"]) if d.get("output") else None,',
             "output=None,",
             ("tests/test_prune.py", "-k", "round_trip or cli_prune_no_validate")),
    Mutation("list: a row's stored bytes read as its logical bytes", "front ends",
             "engine/kerncap/reproducer/summaries.py",
             '    stored: int = _field("stored", "bytes on disk")',
             '    stored: int = _field("logical", "bytes on disk")',
             ("tests/test_info.py", "-k", "own_name")),
    Mutation("native: the capture library's report loads a fresh copy when none is loaded", "capture",
             "engine/kerncap/core/native.py",
             "mode=os.RTLD_NOLOAD | os.RTLD_NOW)", "mode=os.RTLD_NOW)",
             ("tests/test_capture_library_report.py",)),
    Mutation("errors: str() of an error with a hint drops the hint", "front ends",
             "engine/kerncap/errors.py",
             "return self.message if not self.hint else", "return self.message if self.hint else",
             ("tests/test_exit_status.py", "-k", "hint_and")),
    # -- a thirteenth fresh audit (sixteenth session), part ac: the workbench's memory pane, fusion
    # panel, variant tool results, set members, themes and session messages (before: 5 of 6
    # survived; LaunchShown's was caught) ---------------------------------------------------------
    Mutation("memory pane: a sequence's next launch moves the region selection back to the first region", "workbench",
             "kerncap_tui/widgets/memory_pane.py",
             "        self.show(message.capture, launch.params, keep=self.selected)",
             "        self.show(message.capture, launch.params)",
             ("tests/tui/test_sequence_view.py", "-k", "follows_its_launch")),
    Mutation("fusion panel: the shared memory typed is not written (fuse_edit gets grid and block only)", "workbench",
             "kerncap_tui/widgets/fusion_panel.py",
             "api.fuse_edit(root, name, grid=grid, block=block, shared_mem_bytes=smem)",
             "api.fuse_edit(root, name, grid=grid, block=block)",
             ("tests/tui/test_fusion_view.py", "-k", "edited_through")),
    Mutation("variant tools: the oldest sanitizer result of a variant shown as its latest", "workbench",
             "kerncap_tui/variant_inspect.py",
             "        return max(self.sanitize.values(), key=lambda r: r.created, default=None)",
             "        return min(self.sanitize.values(), key=lambda r: r.created, default=None)",
             ("tests/tui/test_inspect_logic.py", "-k", "tool_results or sanitizer_cell")),
    Mutation("set members: a member whose validation failed shown as passed", "workbench",
             "kerncap_tui/set_mode.py",
             '"✓ pass" if r.validation and r.validation.passed', '"✓ pass" if r.validation',
             ("tests/tui/test_set_mode.py",)),
    Mutation("themes: a user theme's own name replaced by its file's name", "workbench",
             "kerncap_tui/theming.py",
             '    data.setdefault("name", path.stem)', '    data["name"] = path.stem',
             ("tests/tui/test_logic.py", "-k", "theme")),
    Mutation("messages: LaunchShown carries launch 0 whatever launch the Profile pane's cursor is on", "workbench",
             "kerncap_tui/messages.py",
             "        self.capture = capture\n        self.launch = launch",
             "        self.capture = capture\n        self.launch = 0",
             ("tests/tui/test_sequence_view.py", "-k", "follows_its_launch")),
    # -- a thirteenth fresh audit (sixteenth session), part ad: Triton's attach and region dtypes,
    # the fuse verb, a sequence's per-launch timing, the SM clock sampler, Triton's recompile checks
    Mutation("triton attach: the record's autotune config taken over the captured launch's own", "triton",
             "engine/kerncap/triton/__init__.py",
             '        tuned = launch.get("autotune_config") or record.get("autotune_config")',
             '        tuned = record.get("autotune_config") or launch.get("autotune_config")',
             ("tests/test_triton_reproducer.py", "-k", "autotune_config_over")),
    Mutation("region dtypes: a tensor's span stops before its last element", "triton",
             "engine/kerncap/triton/__init__.py",
             '    return int(arg["data_ptr"]), int(arg["data_ptr"]) + (last + 1) * int(arg.get("element_size", 1))',
             '    return int(arg["data_ptr"]), int(arg["data_ptr"]) + last * int(arg.get("element_size", 1))',
             ("tests/test_triton_configs.py", "-k", "shared_region")),
    Mutation("fuse: --intermediate without --build silently ignored (a skeleton written)", "sequences",
             "engine/kerncap/commands/fuse.py",
             "    if args.intermediate:", "    if args.intermediate and args.build:",
             ("tests/test_sequences.py", "-k", "intermediates_without")),
    Mutation("sequence time: launch K reports launch K-1's times (launch 0 the whole sequence's)", "sequences",
             "engine/kerncap/replay/sequence_ops.py",
             "        times = [r[1 + k] for r in rows]", "        times = [r[k] for r in rows]",
             ("tests/test_sequences.py", "-k", "sequence_build_rebuilds")),
    Mutation("clocks: NVML left open when the maximum clock does not answer", "significance",
             "engine/kerncap/replay/clocks.py",
             '            device.close()\n            self.reason = f"NVML did not answer',
             '            self.reason = f"NVML did not answer',
             ("tests/test_nvml.py", "-k", "maximum_clock")),
    Mutation("triton recompile: a parameter the variant adds (or drops) not named in the refusal", "triton",
             "engine/kerncap/triton/recompile.py",
             "    for i in range(max(len(new_slots), len(old_slots))):",
             "    for i in range(min(len(new_slots), len(old_slots))):",
             ("tests/test_triton_reproducer.py", "-k", "variant_adds")),
    # -- a fourteenth fresh audit (seventeenth session), part ae: validation and its statistics
    Mutation("validate: every chunk of a written region counts as changed by the captured dispatch", "validation",
             "engine/kerncap/replay/differential.py",
             "for i, (a, b) in enumerate(zip(pre, post)) if a != b)",
             "for i, (a, b) in enumerate(zip(pre, post)))",
             ("tests/test_differential.py", "tests/test_integrity.py", "tests/test_replay_hostmem.py")),
    Mutation("validate: an inconclusive verdict exits 1, as a failure", "validation",
             "engine/kerncap/replay/differential.py",
             'return {"pass": 0, "fail": 1, "inconclusive": 3}[self.verdict]',
             'return {"pass": 0, "fail": 1, "inconclusive": 1}[self.verdict]',
             ("tests/test_differential.py", "tests/test_integrity.py", "tests/test_sets.py")),
    Mutation("compare: --confidence 1 is accepted (a min-max interval, not a confidence interval)", "significance",
             "engine/kerncap/replay/significance.py",
             "    if not 0.5 <= confidence < 1.0:", "    if not 0.5 <= confidence <= 1.0:",
             ("tests/test_significance.py", "tests/test_integrity.py")),
    Mutation("replay session: a region dtype keyed by its id as a string (JSON) is ignored", "validation",
             "engine/kerncap/replay/native_session.py",
             "chosen = explicit.get(item.id) or explicit.get(str(item.id))",
             "chosen = explicit.get(item.id)",
             ("tests/test_replay_session_glue.py", "-k", "keyed_by_its_id_as_a_string")),
    Mutation("perturb: an integer span given --region-dtype is still kept", "perturbation",
             "engine/kerncap/replay/perturb.py",
             '    if s.role == "integer" and not s.explicit:', '    if s.role == "integer":',
             ("tests/test_perturb.py", "tests/test_differential.py")),
    Mutation("launch check: the launches checked are counted as rounds", "integrity",
             "engine/kerncap/replay/launch_check.py",
             "return cls(sum(len(x) for x in rounds), inputs, failures, per)",
             "return cls(len(rounds), inputs, failures, per)",
             ("tests/test_integrity.py", "tests/test_significance.py")),
    # -- a fourteenth fresh audit (seventeenth session), part af: issue 44's own areas (the history's
    # schema, the prune's roots and closure, the session's build, `kerncap build`, the variant history)
    Mutation("history.json: a variant's commit may be any string (an option passed on to git)", "capture format",
             "engine/kerncap/reproducer/schemas.py",
             '"commit?": Opt(Str(pattern=r"[0-9a-f]{4,64}"))', '"commit?": Opt(Str())',
             ("tests/test_history.py", "tests/test_fuzz_history.py")),
    Mutation("prune: a pitched-2D texture object's memory is not a root", "prune", "engine/kerncap/prune/roots.py",
             'if o.resource.get("type") in ("linear", "pitch2d") and region in ids:',
             'if o.resource.get("type") == "linear" and region in ids:',
             ("tests/test_prune.py", "tests/test_arrays.py", "tests/test_sequence_prune.py")),
    Mutation("prune: a pointer past an item's first chunk is named at its offset in that chunk", "prune",
             "engine/kerncap/prune/closure.py",
             "found.setdefault(index, i * cap.chunk_size + offset)", "found.setdefault(index, offset)",
             ("tests/test_prune.py", "-k", "later_chunk")),
    Mutation("build: a cubin compiled earlier from this source is reused though it is gone", "front ends",
             "engine/kerncap/session/session.py",
             "        reused = compiled is not None and compiled.cubin.is_file()",
             "        reused = compiled is not None",
             ("tests/test_session_parity.py", "-k", "gone_since")),
    Mutation("build --json: progress lines printed on stdout, into the JSON", "front ends",
             "engine/kerncap/commands/build.py",
             'print(f"kerncap build: {text}", file=sys.stderr, flush=True)',
             'print(f"kerncap build: {text}", flush=True)',
             ("tests/test_session_parity.py", "tests/test_cli.py")),
    Mutation("history: recording the baseline again keeps the old row 0 too", "history",
             "engine/kerncap/reproducer/history.py",
             "                self.variants = [x for x in self.variants if x.id != 0]",
             "                pass",
             ("tests/test_history.py", "tests/test_check.py", "tests/test_fuzz_history.py")),
    # -- a fourteenth fresh audit (seventeenth session), part ag: issue 44's own areas (MCP's profile tool,
    # the profile's saved form, apply's variant and --dispatch, validate's several DIRs, the Profile pane)
    Mutation("MCP profile: the cwd argument ignored (the app runs in the first root)", "mcp",
             "engine/kerncap/frontends/mcp_server.py",
             "api.profile(command, cwd=workdir", "api.profile(command, cwd=R.dirs[0]",
             ("tests/test_mcp_server.py", "-k", "cwd_given or last_lines")),
    Mutation("profile: a saved sampled profile loads as exact (timing dropped by from_dict)", "profile",
             "engine/kerncap/capture/profile.py",
             '"cupti_finalized", "nvtx", "nvtx_ranges", "buckets", "timing")',
             '"cupti_finalized", "nvtx", "nvtx_ranges", "buckets")',
             ("tests/test_profile_merge.py", "-k", "sampled_profile_loads or roundtrip")),
    Mutation("apply: a History row's cubin that leads out of the reproducer is applied", "apply",
             "engine/kerncap/capture/apply.py",
             "        if root.resolve() not in path.parents:", "        if False:",
             ("tests/test_apply.py", "-k", "leads_out")),
    Mutation("apply --dispatch: launch 0 refused as a negative launch number", "apply",
             "engine/kerncap/capture/apply.py",
             "    if any(n < 0 for n in out):", "    if any(n <= 0 for n in out):",
             ("tests/test_apply.py", "-k", "counts_launches_from_0")),
    Mutation("validate DIR DIR: --device ignored (GPU 0)", "validate",
             "engine/kerncap/commands/validate.py",
             "api.validate_request(args.paths, request, device=args.device",
             "api.validate_request(args.paths, request, device=0",
             ("tests/test_replay_cli.py", "-k", "device_named or two_reproducers")),
    Mutation("workbench: the Profile pane opens a workspace's oldest profile, not its newest", "workbench",
             "kerncap_tui/widgets/profile_pane.py",
             "        return saved[0] if saved else None", "        return saved[-1] if saved else None",
             ("tests/tui/test_app.py", "-k", "newest_saved_profile")),
]


# Put first on the tests' PYTHONPATH: after site-packages' .pth files ran, take out an
# editable install's import hook (scikit-build-core's, setuptools'), which would import
# the working tree's kerncap and not the mutated copy's.
SITECUSTOMIZE = """import sys
sys.meta_path[:] = [f for f in sys.meta_path
                    if not type(f).__module__.startswith(("_editable", "__editable__"))]
"""


def git(*args: str) -> str:
    return subprocess.run(["git", *args], cwd=REPO, check=True, capture_output=True, text=True).stdout


def scratch_copy(dest: Path) -> None:
    """The tracked and untracked-but-not-ignored files of the tree (no build outputs)."""
    for rel in filter(None, git("ls-files", "-co", "--exclude-standard", "-z").split("\0")):
        src = REPO / rel
        if src.is_file() and not src.is_symlink():
            (dest / rel).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(src, dest / rel)
    site = dest / ".mutations-site"
    site.mkdir()
    (site / "sitecustomize.py").write_text(SITECUSTOMIZE)


# A mutation's few test files run in one process: pytest-xdist's workers (pyproject's
# addopts) would only add their start-up.
SERIAL = ("-n", "0") if importlib.util.find_spec("xdist") else ()


def run_tests(tree: Path, tests: tuple[str, ...]) -> tuple[int, str, float]:
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(tree / ".mutations-site"), str(tree / "engine"), str(tree)]))
    t0 = time.monotonic()
    proc = subprocess.run([sys.executable, "-m", "pytest", "-x", "-q", "-p", "no:cacheprovider", *SERIAL, *tests],
                          cwd=tree, env=env, capture_output=True, text=True, timeout=1200)
    lines = [ln for ln in proc.stdout.splitlines() if ln.strip()]
    last = lines[-1] if lines else proc.stderr.strip()[-200:]
    failed = [ln.split(" - ")[0].removeprefix("FAILED ") for ln in lines if ln.startswith("FAILED ")]
    LAST_OUTPUT[:] = (proc.stdout + proc.stderr).splitlines()[-80:]
    return proc.returncode, last + (f"; {failed[0]}" if failed else ""), time.monotonic() - t0


LAST_OUTPUT: list[str] = []  # the tail of the last run's output: why an unmutated run failed


# -- --changed-since: the mutations a change can affect --------------------------------------------


def test_files(m: Mutation) -> list[str]:
    """The files among a mutation's pytest arguments (a node id's file part)."""
    out = []
    for arg, prev in zip(m.tests, ("", *m.tests)):
        if prev != "-k" and not arg.startswith("-"):
            out.append(arg.split("::")[0])
    return out


def helpers_of(test_file: str) -> set[str]:
    """Modules of tests/ (and tests/tui/) that `test_file` imports by name (replay_sim,
    sequence_sim, compare_cases, ...): a change there can weaken its tests too."""
    path = REPO / test_file
    if not path.is_file():
        return set()
    text = path.read_text(errors="replace")
    out = set()
    for folder in {path.parent, REPO / "tests"}:
        for helper in folder.glob("*.py"):
            name = helper.stem
            if not name.startswith("test_") and (f"import {name}" in text or f"from {name} import" in text):
                out.add(str(helper.relative_to(REPO)))
    return out


def base_mutations(base: str) -> set[Mutation]:
    """The mutations this file held at `base` (none where it did not exist)."""
    try:
        text = git("show", f"{base}:tests/mutations.py")
    except subprocess.CalledProcessError:
        return set()
    module = types.ModuleType("mutations_at_base")  # a module: its dataclasses look themselves up
    module.__file__ = __file__
    sys.modules[module.__name__] = module
    try:
        exec(compile(text, "mutations.py@base", "exec"), module.__dict__)
    except Exception:  # an old file that no longer runs: every mutation counts as new
        return set()
    finally:
        del sys.modules[module.__name__]
    return {Mutation(*(getattr(m, f) for f in ("name", "area", "path", "old", "new", "tests")))
            for m in getattr(module, "MUTATIONS", [])}


def changed_since(ref: str, mutations: list[Mutation]) -> tuple[list[Mutation], str]:
    """The mutations a change since the merge base of `ref` and HEAD can affect, most
    directly affected first (a --budget cuts the tail): added or edited mutations (never
    run against this code), then those whose mutated file changed, then those whose tests
    or their helpers did."""
    base = git("merge-base", ref, "HEAD").strip()
    changed = set(filter(None, git("diff", "--name-only", "-z", base).split("\0")))
    changed |= set(filter(None, git("ls-files", "-o", "--exclude-standard", "-z").split("\0")))
    before = base_mutations(base)
    ranked = []
    for i, m in enumerate(mutations):
        files = set(test_files(m))
        for t in test_files(m):
            files |= helpers_of(t)
        rank = 0 if m not in before else 1 if m.path in changed else 2 if files & changed else None
        if rank is not None:
            ranked.append((rank, i, m))
    return [m for _, _, m in sorted(ranked, key=lambda r: r[:2])], base


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--only", nargs="+", metavar="NAME", help="run the mutations whose name contains one of these")
    ap.add_argument("--changed-since", metavar="REF",
                    help="run only the mutations whose files (mutated file, test files, their helpers) changed since "
                         "the merge base of REF and HEAD, and those added or edited here since then")
    ap.add_argument("--budget", type=float, metavar="SECONDS",
                    help="start no mutation after this many seconds (those left are named, not counted)")
    ap.add_argument("--list", action="store_true", help="list the mutations and exit")
    args = ap.parse_args()
    chosen = [m for m in MUTATIONS if not args.only or any(o in m.name for o in args.only)]
    if args.changed_since:
        try:
            chosen, base = changed_since(args.changed_since, chosen)
        except subprocess.CalledProcessError as exc:
            print(f"--changed-since {args.changed_since}: {exc.stderr.strip() or exc}")
            return 2
        print(f"changed since {base[:12]}: {len(chosen)} of {len(MUTATIONS)} mutations apply", flush=True)
    if args.list:
        for m in chosen:
            print(f"{m.area:15} {m.name}  ({m.path}; {' '.join(m.tests)})")
        return 0
    if not chosen:
        return 0
    started = time.monotonic()
    with tempfile.TemporaryDirectory(prefix="kerncap-mutations-") as tmp:
        tree = Path(tmp)
        scratch_copy(tree)
        for m in chosen:  # every snippet must be there exactly once, before anything runs
            count = (tree / m.path).read_text().count(m.old)
            if count != 1:
                print(f"{m.name}: the snippet occurs {count} times in {m.path}; update the mutation")
                return 2
        rows, missed, left, unmutated_ok, cannot = [], [], [], set(), {}
        for m in chosen:
            if args.budget is not None and time.monotonic() - started > args.budget:
                left.append(m.name)
                continue
            if m.tests in cannot:
                continue
            if m.tests not in unmutated_ok:  # the tests pass unmutated first (once per set of tests)
                rc, last, seconds = run_tests(tree, m.tests)
                if rc != 0:
                    print("\n".join(LAST_OUTPUT))
                    print(f"unmutated tree: {' '.join(m.tests)} fails already ({last}); fix that first")
                    return 2
                if not _ran(last):  # every test skipped here (no nvcc, no native build): no verdict
                    cannot[m.tests] = last
                    print(f"not run {m.name}  [{' '.join(m.tests)}: {last}: nothing runs on this machine]", flush=True)
                    continue
                unmutated_ok.add(m.tests)
            path = tree / m.path
            original = path.read_text()
            path.write_text(original.replace(m.old, m.new))
            try:
                rc, last, seconds = run_tests(tree, m.tests)
            finally:
                path.write_text(original)
            caught = rc != 0
            if not caught:
                missed.append(m.name)
            rows.append(m.name)
            print(f"{'caught' if caught else 'MISSED':6}  {m.name}  [{' '.join(m.tests)}: {last}] ({seconds:.0f} s)",
                  flush=True)
    skipped = [m.name for m in chosen if m.tests in cannot]
    print(f"\n{len(rows) - len(missed)} of {len(rows)} mutations caught" + (f"; missed: {', '.join(missed)}" if missed else "")
          + (f"; not run (--budget {args.budget:g} s): {', '.join(left)}" if left else "")
          + (f"; not run (their tests skip here): {', '.join(skipped)}" if skipped else ""))
    return 0 if not missed else 1


def _ran(last: str) -> bool:
    """Whether pytest's summary line says a test passed (not only skipped or deselected)."""
    return re.search(r"\b\d+ passed\b", last) is not None


if __name__ == "__main__":
    raise SystemExit(main())
