"""What the test hosts serve, made at fixture time and offline: a 10 MB random file, a PEP 503
package index holding a wheel built here, and a bare git repository laid out for git's "dumb"
HTTP protocol (the certificates are net_hosts_certs.py's).

Everything shared lives once in the run's folder; each host's web root holds its own
``hello.txt`` and links to the shared entries.
"""

from __future__ import annotations

import base64
import hashlib
import os
import subprocess
import zipfile
from dataclasses import dataclass
from pathlib import Path

BIG_SIZE = 10 * 1024 * 1024
PROBE_PROJECT = "stockade-egress-probe"
PROBE_VERSION = "1.0"
PROBE_MODULE = "stockade_egress_probe"
PROBE_MESSAGE = "stockade-egress-probe 1.0 works"
REPO_FILE = "hello.txt"
REPO_TEXT = "hello from the test repository\n"
SHARED_ENTRIES = ("big.bin", "packages", "simple", "repo.git")


def hello_text(name: str) -> str:
    """What ``/hello.txt`` holds on the host called ``name``."""
    return f"hello from {name}\n"


# -- what every host serves --------------------------------------------------------------------


@dataclass(frozen=True)
class Shared:
    """The content every host serves, and what a test checks a download against."""

    folder: Path
    big_sha256: str  # of /big.bin, BIG_SIZE random bytes
    wheel_name: str  # served at /packages/<wheel_name>, listed by /simple/stockade-egress-probe/
    wheel_sha256: str
    repo_head: str  # the commit refs/heads/main of /repo.git points to


def make_shared(folder: Path) -> Shared:
    folder.mkdir(parents=True)
    big = os.urandom(BIG_SIZE)
    (folder / "big.bin").write_bytes(big)
    wheel = _write_wheel(folder / "packages")
    wheel_sha256 = hashlib.sha256(wheel.read_bytes()).hexdigest()
    _write_index(folder / "simple", wheel.name, wheel_sha256)
    head = _write_repo(folder / "repo.git")
    return Shared(folder, hashlib.sha256(big).hexdigest(), wheel.name, wheel_sha256, head)


def make_web_root(shared: Shared, name: str, folder: Path) -> Path:
    """The folder the host called ``name`` serves: its own hello.txt, the shared rest linked."""
    root = folder / "www"
    root.mkdir(parents=True)
    (root / "hello.txt").write_text(hello_text(name), encoding="utf-8")
    for entry in SHARED_ENTRIES:
        (root / entry).symlink_to(shared.folder / entry)
    return root


def _write_wheel(folder: Path) -> Path:
    """A pure-Python wheel written as the zip it is: no build tooling, no network."""
    folder.mkdir()
    dist_info = f"{PROBE_MODULE}-{PROBE_VERSION}.dist-info"
    files = {
        f"{PROBE_MODULE}.py": (
            '"""A tiny package the test hosts\' index serves."""\n\n'
            f"MESSAGE = {PROBE_MESSAGE!r}\n\n\n"
            "def main() -> None:\n    print(MESSAGE)\n\n\n"
            'if __name__ == "__main__":\n    main()\n'
        ),
        f"{dist_info}/METADATA": (
            f"Metadata-Version: 2.1\nName: {PROBE_PROJECT}\nVersion: {PROBE_VERSION}\n"
            "Summary: A tiny package the Stockade test hosts serve\n"
        ),
        f"{dist_info}/WHEEL": (
            "Wheel-Version: 1.0\nGenerator: stockade-tests\nRoot-Is-Purelib: true\n"
            "Tag: py3-none-any\n"
        ),
    }
    record = [
        f"{path},sha256={_urlsafe_digest(text)},{len(text.encode())}"
        for path, text in files.items()
    ]
    files[f"{dist_info}/RECORD"] = "\n".join([*record, f"{dist_info}/RECORD,,"]) + "\n"
    path = folder / f"{PROBE_MODULE}-{PROBE_VERSION}-py3-none-any.whl"
    with zipfile.ZipFile(path, "w", zipfile.ZIP_DEFLATED) as wheel:
        for name, text in files.items():
            wheel.writestr(name, text)
    return path


def _urlsafe_digest(text: str) -> str:
    digest = hashlib.sha256(text.encode()).digest()
    return base64.urlsafe_b64encode(digest).rstrip(b"=").decode()


def _write_index(folder: Path, wheel_name: str, sha256: str) -> None:
    """PEP 503: /simple/ lists the project, /simple/<project>/ links its wheel with its hash."""
    project = folder / PROBE_PROJECT
    project.mkdir(parents=True)
    page = "<!DOCTYPE html>\n<html><body>\n{}\n</body></html>\n"
    link = f'<a href="/simple/{PROBE_PROJECT}/">{PROBE_PROJECT}</a>'
    (folder / "index.html").write_text(page.format(link), encoding="utf-8")
    link = f'<a href="/packages/{wheel_name}#sha256={sha256}">{wheel_name}</a>'
    (project / "index.html").write_text(page.format(link), encoding="utf-8")


def _write_repo(path: Path) -> str:
    """A bare repository with one commit, its server info written so static files serve it."""
    env = {
        "PATH": os.environ.get("PATH", "/usr/bin:/bin"),
        "GIT_CONFIG_GLOBAL": os.devnull,
        "GIT_CONFIG_NOSYSTEM": "1",
        "GIT_DIR": str(path),
        # fixed names and dates: the same content gives the same commit in every run
        "GIT_AUTHOR_NAME": "Stockade tests",
        "GIT_AUTHOR_EMAIL": "tests@stockade.test",
        "GIT_AUTHOR_DATE": "2000-01-01T00:00:00Z",
        "GIT_COMMITTER_NAME": "Stockade tests",
        "GIT_COMMITTER_EMAIL": "tests@stockade.test",
        "GIT_COMMITTER_DATE": "2000-01-01T00:00:00Z",
    }

    def git(*args: str, stdin: str = "") -> str:
        done = subprocess.run(
            ["git", *args], input=stdin, env=env, capture_output=True, text=True, check=False
        )
        if done.returncode != 0:
            said = done.stderr.strip()
            raise RuntimeError(f"git {' '.join(args)} failed making the test repository: {said}")
        return done.stdout.strip()

    git("init", "--quiet", "--bare", "--initial-branch=main", str(path))
    blob = git("hash-object", "-w", "--stdin", stdin=REPO_TEXT)
    tree = git("mktree", stdin=f"100644 blob {blob}\t{REPO_FILE}\n")
    head = git("commit-tree", tree, "-m", "The test repository")
    git("update-ref", "refs/heads/main", head)
    git("update-server-info")
    return head
