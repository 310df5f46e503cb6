"""The folders ``stockade demo`` works in, and the promise it keeps about them: it writes inside
the folder it was given (``--workspace``) and in a temporary folder of its own, and nowhere
else.

The demo's workspace is the folder given (or ``workspace/`` in the temporary folder when none
is): its project files go there (``README.md``, ``src/app.py``), and the agent's work (a note in
``notes/``, the ``src/__pycache__`` its command leaves). One step shows a symbolic link that
leads out of the workspace being refused; the secret it points at must lie outside the
workspace, so it lives in the demo's temporary folder (never beside the folder given, which may
be anyone's), and the link and that folder are removed when the demo ends, Ctrl-C included.

A folder given must be new or empty: the demo would otherwise mix its files into someone's
project. ``--force`` lets it use a folder that holds other things, but never one that already
holds a name the demo writes or tries to write (`DEMO_NAMES`): it never changes or removes a
file it did not create. A folder given that does not exist is created, but not the folders
above it. Each refusal is a `ConfigurationError` saying how to go on; the command turns it into
a usage error (exit 2).

    with demo_folders(check_workspace(Path("dws"), force=False)) as folders:
        ...  # folders.workspace holds the project; folders.secret lies outside it
"""

from __future__ import annotations

import contextlib
import os
import tempfile
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

from stockade.errors import ConfigurationError

# Every name the demo writes, or has its agent try to write, at the top of its workspace:
# ".env" and ".git" are refused by the policy, but a folder holding them is not one to try it on.
DEMO_NAMES = ("README.md", "src", "notes", "docs-link", ".env", ".git")
LINK = "docs-link"
_SHOWN = 4  # names listed in a refusal before "and N more"


@dataclass(frozen=True, slots=True)
class DemoFolders:
    """Where the demo runs: ``workspace`` (mounted at /workspace) and ``secret``, the file
    outside it that the workspace's symbolic link leads to."""

    workspace: Path
    secret: Path
    temporary: bool  # the workspace is the demo's own, removed at the end


def check_workspace(workspace: Path, *, force: bool) -> Path:
    """The folder ``--workspace`` names, as a full path (a relative one is taken from the
    current folder), if the demo may use it; raises `ConfigurationError` saying why not and
    what to do. Creates nothing."""
    full = Path(os.path.abspath(workspace))
    shown = str(workspace)
    if full.is_symlink() and not full.exists():
        raise ConfigurationError(
            f"--workspace {shown} is a link to nothing ({os.readlink(full)}); give a folder"
        )
    if not full.exists():
        if not full.parent.is_dir():
            raise ConfigurationError(
                f"--workspace {shown}: the folder it would be made in, {full.parent}, does not "
                "exist; create it first, or give a folder that exists or one directly inside one"
            )
        return full
    if not full.is_dir():
        raise ConfigurationError(f"--workspace {shown} is not a folder; give a folder")
    present = sorted(entry.name for entry in full.iterdir())
    if not present:
        return full
    if not force:
        raise ConfigurationError(
            f"--workspace {shown} is not empty (it holds {_names(present)}), and the demo writes "
            "a project of its own there; give a new or empty folder, or add --force to add the "
            "demo's files beside these (it never changes a file it did not create)"
        )
    clashes = [name for name in DEMO_NAMES if os.path.lexists(full / name)]
    if clashes:
        raise ConfigurationError(
            f"--workspace {shown} already holds {_names(clashes)}, which the demo writes or "
            "tries to write, and even with --force it never touches a file it did not create; "
            "give a new or empty folder, or move those away"
        )
    return full


def _names(names: list[str]) -> str:
    listed = ", ".join(names[:_SHOWN])
    more = len(names) - _SHOWN
    return f"{listed} and {more} more" if more > 0 else listed


@contextlib.contextmanager
def demo_folders(workspace: Path | None) -> Iterator[DemoFolders]:
    """The demo's folders, ready: ``workspace`` (a full path `check_workspace` passed; None for
    a temporary one) created if need be and holding the demo's project, and the secret outside
    it in a temporary folder. On the way out the temporary folder goes, and with it the
    secret, the link to it, and a temporary workspace; a workspace given keeps the rest of
    the demo's files. Raises OSError when a folder or file cannot be made."""
    with tempfile.TemporaryDirectory(prefix="stockade-demo-") as tmp:
        own = Path(tmp)
        secret = own / "outside-secret.txt"
        secret.write_text("not for agents\n")
        temporary = workspace is None
        root = own / "workspace" if workspace is None else workspace
        if temporary or not root.exists():
            root.mkdir()  # never the folders above it: those are not the demo's
        link = root / LINK
        try:
            prepare_workspace(root, secret)
            yield DemoFolders(root, secret, temporary)
        finally:
            # the link points into the folder about to go: remove it if it is still ours
            with contextlib.suppress(OSError):
                if link.is_symlink() and Path(os.readlink(link)) == secret:
                    link.unlink()


def prepare_workspace(root: Path, secret: Path) -> None:
    """A small project in ``root``, plus the kind of trap an untrusted repository may hold: a
    symbolic link that leads out of the workspace, to ``secret``. Writes only names in
    `DEMO_NAMES`, and none that is there already (``x`` mode: a file created meanwhile by
    someone else is left alone, and the demo stops)."""
    (root / "src").mkdir()
    with (root / "src" / "app.py").open("x", encoding="utf-8") as source:
        source.write("def greet(name):\n    return 'hello ' + name\n")
    with (root / "README.md").open("x", encoding="utf-8") as readme:
        readme.write("# demo project\n")
    os.symlink(secret, root / LINK)


__all__ = ["DEMO_NAMES", "DemoFolders", "check_workspace", "demo_folders", "prepare_workspace"]
