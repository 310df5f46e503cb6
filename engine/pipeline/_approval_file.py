"""Appending an "always" approval to a policy file: atomically, and only if it still works.

The new text (the file as it is, then a comment saying when and for which call, then the
``[[approvals]]`` tables) must load as a policy and lint without a finding the file did not
already have; only then is it written, to a temporary file beside it, flushed to disk and
renamed over it, so that a crash leaves the old file or the new one, never half of either.
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import tempfile
import tomllib
from pathlib import Path

from stockade.policies import Policy, PolicyError, lint_text
from stockade.policies.policy_file import parse
from stockade.policies.suggestions import Suggestion


def append_approvals(path: Path, suggestion: Suggestion, reason: str, comment: str) -> str:
    """Append ``suggestion``'s approvals to the policy file at ``path``; returns the new text.
    Raises `PolicyError` (the file would not load or lint clean) or `OSError`. Writers hold an
    exclusive lock on the file's folder, so two engines appending at once both keep theirs."""
    folder = os.open(path.parent, os.O_RDONLY | os.O_DIRECTORY)
    try:
        fcntl.flock(folder, fcntl.LOCK_EX)
        return _append(path, suggestion, reason, comment, folder)
    finally:
        os.close(folder)  # (and with it the lock)


def _append(path: Path, suggestion: Suggestion, reason: str, comment: str, folder: int) -> str:
    old = path.read_text(encoding="utf-8")
    glue = "" if not old or old.endswith("\n") else "\n"
    new = f"{old}{glue}\n{suggestion.toml(reason, comment)}"
    try:
        new.encode("utf-8")
    except UnicodeEncodeError:
        raise PolicyError("the approval holds text that is not valid Unicode") from None
    try:
        data = tomllib.loads(new)
    except tomllib.TOMLDecodeError as exc:
        raise PolicyError(f"the approval would make {path} invalid TOML ({exc})") from None
    Policy(parse(data, source=str(path), text=new), source=str(path), text=new)
    before = _findings(old, str(path))
    added = [f for f in _findings(new, str(path)) if f not in before]
    if added:
        raise PolicyError(f"the approval would make {path} lint with: {'; '.join(added)}")
    _replace(path, new, folder)
    return new


def _findings(text: str, source: str) -> list[str]:
    return [
        f"{f.severity}: {f.key}: {f.message}"
        for f in lint_text(text, source=source)
        if f.severity != "info"
    ]


def _replace(path: Path, text: str, folder: int) -> None:
    """Write ``text`` over ``path`` atomically (a new file of its own in the same folder,
    fsync, rename, fsync the folder), keeping the file's permissions. The new file's name is
    random and made exclusively: a link planted where it would go is never written through."""
    mode = path.stat().st_mode & 0o7777
    fd, temporary = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".approval", dir=path.parent)
    try:
        with os.fdopen(fd, "wb") as out:
            out.write(text.encode("utf-8"))
            out.flush()
            os.fchmod(out.fileno(), mode)
            os.fsync(out.fileno())
        os.replace(temporary, path)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(temporary)
        raise
    os.fsync(folder)
