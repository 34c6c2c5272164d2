"""What a capture says about memory or handles its replay cannot give the kernel.

When the *captured* cubin faults or differs from its own capture in replay, the cause is
in the capture, not in a variant: a parameter word that points outside every captured
range (manifest `closure.unresolved`), host memory that was recorded but not
snapshotted, a handle that could not be restored. `likely_causes` lists those in the
words the replay errors and `validate` use; the texture/surface support adds its
handle findings here too.
"""

from __future__ import annotations

from kerncap.reproducer.format import NOT_SNAPSHOTTED_OLD, Capture

MAX_LISTED = 4


def word_text(u: dict) -> str:
    """'parameter 2 word +8' for an unresolved word of one dispatch; 'launch 3 parameter 2' in a sequence."""
    at = f" word +{u['at']}" if u.get("at") else ""
    launch = f"launch {u['launch']} " if u.get("launch") is not None else ""
    return f"{launch}parameter {u['param']}{at}"


def likely_causes(cap: Capture) -> list[str]:
    """One line per thing in the capture that a replay cannot provide (most telling first)."""
    causes = []
    unresolved = cap.closure.get("unresolved") or []
    for u in unresolved[:MAX_LISTED]:
        causes.append(f"{word_text(u)} holds {u['value']:#x}, outside the captured memory "
                      f"({u.get('reason') or 'no region, global or host region holds it'})")
    if len(unresolved) > MAX_LISTED:
        causes.append(f"{len(unresolved) - MAX_LISTED} more parameter word(s) outside the captured memory "
                      "(`kerncap info`)")
    for h in cap.host_regions:
        if not h.snapshotted and h.device_pointer is not None and h.size and h.why_not != NOT_SNAPSHOTTED_OLD:
            causes.append(f"host region {h.id} ({h.api}, {h.size} bytes at {h.base:#x}) was not snapshotted: "
                          f"{h.why_not or 'recorded only'}")
    pointed = {hp.get("host_region") for p in cap.manifest.get("params", []) for hp in p.get("host_pointers") or []}
    old = [h for h in cap.host_regions if h.why_not == NOT_SNAPSHOTTED_OLD and h.size]
    if old:
        which = [h for h in old if h.id in pointed] or old
        causes.append(f"{len(which)} host region(s) were recorded but not snapshotted by the kerncap that made "
                      "this capture; a kernel reading mapped host memory faults in replay (extract again)")
    return causes


def cause_text(cap: Capture) -> str:
    """'' or " Likely cause, from the capture: …; …" for an error message."""
    causes = likely_causes(cap)
    if not causes:
        return ""
    return " Likely cause, from the capture (not the kernel's code): " + "; ".join(causes) + "."
