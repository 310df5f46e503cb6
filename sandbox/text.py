"""Files as text: when bytes count as UTF-8 text, and how two versions of a file differ.

One rule for every reader (the virtual filesystem's ``read_text``, the file tools, an overlay's
review of its changes), so a file is text, or binary, everywhere alike:

    text = decode_text(data, "/workspace/notes.txt")      # NotTextError if it is not text
    print(unified_diff("/workspace/notes.txt", old, new))  # "--- a/workspace/notes.txt" ...
"""

from __future__ import annotations

import difflib

from stockade.sandbox.errors import NotTextError

SNIFF_BYTES = 8192  # a NUL byte among a file's first bytes marks it binary (as git and grep do)


def decode_text(data: bytes, path: str, *, offset: int = 0) -> str:
    """``data`` as UTF-8 text; `NotTextError` naming ``path`` when it looks binary (a NUL byte
    among its first `SNIFF_BYTES`) or is not UTF-8. ``offset``: where ``data`` starts in the
    file, so the error names the byte of the file that cannot be decoded (a part of a file is
    checked for NUL bytes only when it is its beginning)."""
    if offset == 0:
        refuse_binary(data, path)
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise NotTextError(
            f"{path} is not UTF-8 text (byte {offset + exc.start} cannot be decoded)", path
        ) from None


def refuse_binary(start: bytes, path: str) -> None:
    """`NotTextError` naming ``path`` when ``start``, the beginning of a file, holds a NUL byte
    among its first `SNIFF_BYTES`: the file looks binary."""
    if b"\x00" in start[:SNIFF_BYTES]:
        raise NotTextError(f"{path} looks binary (it contains NUL bytes); it is not text", path)


def unified_diff(path: str, old: bytes | None, new: bytes | None) -> str:
    """A unified diff of a file's bytes (``None``: absent); binary files as their sizes."""
    binary = any(b"\x00" in data for data in (old, new) if data is not None)
    try:
        before = [] if old is None else old.decode("utf-8").splitlines(keepends=True)
        after = [] if new is None else new.decode("utf-8").splitlines(keepends=True)
    except UnicodeDecodeError:
        binary = True
    if binary:
        size_old = "absent" if old is None else f"{len(old)} bytes"
        size_new = "absent" if new is None else f"{len(new)} bytes"
        return f"binary file {path}: {size_old} -> {size_new}\n"
    lines = difflib.unified_diff(
        before,
        after,
        fromfile="/dev/null" if old is None else f"a{path}",
        tofile="/dev/null" if new is None else f"b{path}",
    )
    return "".join(line if line.endswith("\n") else line + "\n" for line in lines)
