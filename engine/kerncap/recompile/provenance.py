"""Whether a reproducer is the user's own fresh extraction (docs/sources.md, "Your own
extraction").

`kerncap recompile` refuses recorded include directories outside the reproducer
(kerncap.recompile.trust) because a reproducer from someone else could point the
compiler anywhere. A reproducer this user extracted on this machine records its own
app's directories, so those pass without --trust. Extraction records how the reproducer
came to be in source/build.json's `origin` (user id, host name, machine id, the
reproducer directory's device and inode, a random token) and keeps the token, with the
same facts and a digest of the recorded compile, in a file of the user's state directory
($XDG_STATE_HOME/kerncap/extracted/, 0700) that no reproducer holds. `verify` accepts a
reproducer only when all of them agree: a copy, an unpacked pack (another inode), a
reproducer owned by another user or made on another machine, a token the state directory
does not hold, or a compile command edited since (another digest) is refused as before.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import secrets
import socket
import stat
import time
from pathlib import Path

_TOKEN = re.compile(r"[0-9a-f]{32}")
# The fields of source/build.json the extraction vouches for.
_DIGESTED = ("kernel", "compile_command", "cwd", "source_root", "tu", "include_dirs")


def state_dir() -> Path:
    """$XDG_STATE_HOME/kerncap/extracted (default ~/.local/state/kerncap/extracted)."""
    base = os.environ.get("XDG_STATE_HOME")
    if not base or not os.path.isabs(base):
        base = os.path.join(os.path.expanduser("~"), ".local", "state")
    return Path(base) / "kerncap" / "extracted"


def machine_id() -> str:
    for path in ("/etc/machine-id", "/var/lib/dbus/machine-id"):
        try:
            text = Path(path).read_text().strip()
        except OSError:
            continue
        if text:
            return text
    return ""


def digest(build: dict) -> str:
    return hashlib.sha256(json.dumps({k: build.get(k) for k in _DIGESTED}, sort_keys=True).encode()).hexdigest()


def _facts(reproducer: Path) -> dict:
    st = os.stat(reproducer)
    return {"uid": os.getuid(), "host": socket.gethostname(), "machine_id": machine_id(),
            "dev": st.st_dev, "ino": st.st_ino}


def record(reproducer: Path, build: dict) -> dict:
    """Remember that this user extracted `reproducer` here with `build` (its final
    source/build.json contents); returns the `origin` to store in it."""
    token = secrets.token_hex(16)
    facts = _facts(reproducer)
    directory = state_dir()
    # kerncap/ as well as extracted/ made 0700: verify refuses either when others can write
    # it, and a parent made by mkdir(parents=True) took the umask's mode (0775 under 002)
    directory.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
    directory.mkdir(exist_ok=True, mode=0o700)
    for d in (directory.parent, directory):  # made so by an earlier kerncap: kerncap's own, tightened
        st = os.lstat(d)
        if st.st_uid == os.getuid() and stat.S_ISDIR(st.st_mode) and st.st_mode & 0o022:
            os.chmod(d, 0o700)
    entry = {**facts, "path": str(Path(reproducer).resolve()), "digest": digest(build),
             "created": time.strftime("%Y-%m-%dT%H:%M:%S%z")}
    tmp = directory / f".{token}.tmp-{os.getpid()}"
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    with os.fdopen(fd, "w") as f:
        f.write(json.dumps(entry) + "\n")
    os.replace(tmp, directory / f"{token}.json")
    return {"token": token, "uid": facts["uid"], "host": facts["host"], "machine_id": facts["machine_id"],
            "dev": facts["dev"], "ino": facts["ino"]}


def verify(reproducer: Path, build: dict) -> str | None:
    """None when `reproducer` is this user's own extraction on this machine, unchanged
    where it matters; else why not (a sentence)."""
    origin = build.get("origin")
    if not isinstance(origin, dict) or not isinstance(origin.get("token"), str) \
            or not _TOKEN.fullmatch(origin["token"]):
        return "it records no extraction on this machine"
    uid = os.getuid()
    for path in (reproducer, reproducer / "source", reproducer / "source" / "build.json"):
        try:
            st = os.lstat(path)
        except OSError:
            return f"{path} cannot be read"
        if st.st_uid != uid or stat.S_ISLNK(st.st_mode):
            return f"{path} is not yours"
    try:
        facts = _facts(reproducer)
    except OSError:
        return "the reproducer cannot be read"
    if any(origin.get(k) != facts[k] for k in facts):
        return "it was extracted elsewhere (another user, machine or directory: a copy or an unpacked pack)"
    directory = state_dir()
    entry_path = directory / f"{origin['token']}.json"
    try:
        for path in (directory.parent, directory, entry_path):
            st = os.lstat(path)
            if st.st_uid != uid or stat.S_ISLNK(st.st_mode) or (st.st_mode & 0o022):
                return f"{path} is not a private file or directory of yours"
        entry = json.loads(entry_path.read_text())
    except (OSError, ValueError):
        return f"this user's state directory ({directory}) does not know it"
    if not isinstance(entry, dict) or any(entry.get(k) != facts[k] for k in facts):
        return "it is not the reproducer the extraction wrote"
    if entry.get("digest") != digest(build):
        return "its recorded compile was edited since the extraction"
    return None
