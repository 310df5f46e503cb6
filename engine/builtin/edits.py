"""`edit_file`: exact replacements in a text file, one or several, all or nothing, with a diff.

Each edit's ``old_text`` must occur exactly once in the text as the edits before it left it
(or set ``replace_all`` on that edit); if any edit fails, nothing is written and the error says
which. A dry run returns the unified diff the edit would make and writes nothing; a real edit
returns it too. The file is written once, atomically, through the virtual filesystem.

    edit_file("app.py", fs, old_text="return 1", new_text="return 2")
    edit_file("app.py", fs, edits=[TextEdit(old_text="a", new_text="b"), ...], dry_run=True)

Edits also accept ``oldText``/``newText`` (and ``replaceAll``) as keys, the spelling of the
reference MCP filesystem server, so clients written for it work unchanged.
"""

from __future__ import annotations

from typing import Annotated

from pydantic import AliasChoices, BaseModel, ConfigDict, Field

from stockade.engine.builtin.file_support import changed, cut, sha
from stockade.engine.content import ToolOutput
from stockade.engine.tools import tool
from stockade.sandbox import QuotaError, VirtualFS
from stockade.sandbox.text import decode_text, unified_diff

MAX_EDITS = 100


class TextEdit(BaseModel):
    """One replacement: the exact text to find, and what to put in its place."""

    model_config = ConfigDict(extra="forbid", populate_by_name=True)

    old_text: str = Field(
        validation_alias=AliasChoices("old_text", "oldText"),
        description="The exact text to find (whitespace and line breaks included).",
    )
    new_text: str = Field(
        validation_alias=AliasChoices("new_text", "newText"),
        description="What to put in its place.",
    )
    replace_all: bool = Field(
        default=False,
        validation_alias=AliasChoices("replace_all", "replaceAll"),
        description="Replace every occurrence; otherwise old_text must occur exactly once.",
    )


@tool(paths={"path": "write"})
def edit_file(
    path: str,
    fs: VirtualFS,
    old_text: str | None = None,
    new_text: str | None = None,
    replace_all: bool = False,
    edits: Annotated[list[TextEdit] | None, Field(min_length=1, max_length=MAX_EDITS)] = None,
    dry_run: bool = False,
) -> ToolOutput:
    """Replace exact pieces of text in a file: one (old_text, new_text), or several in order
    (edits), all or nothing. Returns the unified diff; with dry_run, only the diff.

    Args:
        path: The file to edit.
        old_text: The exact text to find (whitespace and line breaks included).
        new_text: What to put in its place.
        replace_all: Replace every occurrence of old_text; otherwise it must occur exactly once.
        edits: Instead of old_text/new_text: replacements applied in order, all or nothing.
        dry_run: Show the diff the edit would make, and write nothing.
    """
    steps = _steps(old_text, new_text, replace_all, edits)
    canonical = fs.canonical(path)
    before = fs.read_bytes(path)
    text = decode_text(before, canonical)
    replaced = 0
    for number, step in enumerate(steps, 1):
        label = "old_text" if edits is None else f"edit {number} of {len(steps)}: old_text"
        if not step.old_text:
            raise ValueError(
                f"{label} is empty; give the exact text to replace; nothing was written"
            )
        count = text.count(step.old_text)
        after = " (as the edits before it left the file)" if number > 1 else ""
        if count == 0:
            raise ValueError(
                f"{label} was not found in {canonical}{after}; read the file and copy the text "
                "exactly, whitespace included; nothing was written"
            )
        if count > 1 and not step.replace_all:
            raise ValueError(
                f"{label} occurs {count} times in {canonical}{after}; include more surrounding "
                "text to make it unique, or set replace_all; nothing was written"
            )
        # the length the text would have, checked before it is built: edits that each multiply
        # it (replace_all of "a" by "aa", forty times) would otherwise take all the memory there
        # is, and a dry run of an edit the write would refuse must be refused as well
        grown = len(text) + count * (len(step.new_text) - len(step.old_text))
        if grown > fs.max_file_bytes:
            raise QuotaError(
                f"{'the edit' if edits is None else f'edit {number} of {len(steps)}'} would make "
                f"{canonical} at least {grown} "
                f"bytes, over the {fs.max_file_bytes}-byte limit for one file; nothing was "
                "written",
                canonical,
            )
        text = text.replace(step.old_text, step.new_text)
        replaced += count
    new = text.encode("utf-8")
    if len(new) > fs.max_file_bytes:  # characters of more than one byte: the write would refuse
        raise QuotaError(
            f"the edits would make {canonical} {len(new)} bytes, over the {fs.max_file_bytes}-"
            "byte limit for one file; nothing was written",
            canonical,
        )
    diff, _ = cut(unified_diff(canonical, before, new), "read the file for the rest")
    occurrences = f"{replaced} occurrence{'s' if replaced != 1 else ''}"
    if dry_run:
        metadata = {
            "path": canonical,
            "dry_run": True,
            "replacements": replaced,
            "sha256": sha(before),
        }
        message = f"dry run: would replace {occurrences} in {canonical}; nothing was written"
        return ToolOutput(f"{message}\n\n{diff}".rstrip("\n"), metadata)
    fs.write_bytes(path, new)
    message = f"replaced {occurrences} in {canonical}"
    return changed(canonical, before, new, f"{message}\n\n{diff}".rstrip("\n"))


def _steps(
    old_text: str | None, new_text: str | None, replace_all: bool, edits: list[TextEdit] | None
) -> list[TextEdit]:
    """The replacements asked for, one way or the other (never both)."""
    if edits is not None:
        if old_text is not None or new_text is not None or replace_all:
            raise ValueError(
                "give old_text/new_text (with replace_all), or edits, not both; in edits, set "
                "replace_all on each edit that needs it"
            )
        return edits
    if old_text is None or new_text is None:
        raise ValueError(
            "give old_text and new_text, or edits: a list of {old_text, new_text} replacements"
        )
    return [TextEdit(old_text=old_text, new_text=new_text, replace_all=replace_all)]
