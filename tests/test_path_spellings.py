"""The two path normalisers agree: what a policy judges is the file the sandbox opens.

`stockade.policies.canonical` is the path as a policy sees it; `stockade.sandbox.logical.normalize`
is the path the virtual filesystem and the process box act on. A file reached by a spelling the
two resolve differently would be judged as one file and opened as another, so wherever both
accept a spelling they must give the same path. Both take relative paths from the same folder
(``/workspace``, or the ``cwd`` given), drop ``.`` and empty segments and trailing slashes, and
resolve ``..`` lexically; both refuse an empty path and a NUL byte.

Where one accepts what the other refuses, it is the sandbox that refuses, never the other way
round (a policy must be able to judge everything the sandbox would open), and only for these
intended reasons, each tested on its own below:

* ``..`` above ``/``: the policy stops at ``/`` (it still judges ``/../etc/passwd``, as
  ``/etc/passwd``); the sandbox refuses the path, as it leads outside every mount;
* length: the sandbox refuses a name over 255 bytes or a path over 4096 bytes (no Linux file
  system holds them); the policy judges any length;
* surrogates: a file name is bytes, which a string spells as UTF-8 text with U+DC80-U+DCFF for
  the bytes that are not UTF-8. The sandbox refuses surrogates that stand for no byte, and
  escaped bytes that are UTF-8 (``caf\\udcc3\\udca9`` is the file ``café``, a second spelling a
  policy judging the string would not recognise); the policy takes them as characters.
"""

from __future__ import annotations

from collections.abc import Callable

import pytest
from hypothesis import example, given, settings
from hypothesis import strategies as st

from stockade.policies import canonical
from stockade.policies.paths import PathSpellingError
from stockade.sandbox import PathEscapeError
from stockade.sandbox.logical import MAX_NAME, MAX_PATH, normalize, split

FOLDERS = ("/workspace", "/", "/srv/project", "/workspace/sub dir")

# -- the intended differences, as predicates on the input --------------------------------------


def climbs_above_root(path: str, cwd: str) -> bool:
    """Whether resolving ``path`` from ``cwd`` takes ``..`` above ``/`` at some point."""
    depth = 0
    for segment in (path if path.startswith("/") else f"{cwd}/{path}").split("/"):
        if segment == "..":
            if depth == 0:
                return True
            depth -= 1
        elif segment not in ("", "."):
            depth += 1
    return False


def too_long(path: str, resolved: str) -> bool:
    """Whether ``path`` as given, or ``resolved`` (what it names), or one of its names, is
    longer than a Linux file system allows."""
    sizes = (len(p.encode("utf-8", "surrogatepass")) for p in (path, resolved))
    names = (len(s.encode("utf-8", "surrogatepass")) for s in path.split("/"))
    return max(sizes) > MAX_PATH or max(names) > MAX_NAME


def has_surrogate(path: str) -> bool:
    return any("\ud800" <= ch <= "\udfff" for ch in path)


# -- the property ------------------------------------------------------------------------------

SEGMENT = st.one_of(
    st.sampled_from(
        [
            "", ".", "..", "...", "a", "b.txt", ".env", "~", "~user", "$HOME", " ", " x ",
            "workspace", "WORKSPACE", "ü", "café", "cafe\u0301", "日本語", "ｅ", "\u200b",
            "\\", "..\\..", "%2e%2e", "\x00", "a\x00b", "\udcff", "\udcc3\udca9", "\ud800",
            "x" * 255, "x" * 256, "é" * 127, "é" * 128,
        ]
    ),
    st.text(max_size=12),
    st.text(alphabet=st.characters(min_codepoint=0xD800, max_codepoint=0xDFFF), max_size=3),
)  # fmt: skip
SPELLING = st.builds(
    lambda lead, segments, trail: lead + "/".join(segments) + trail,
    st.sampled_from(["", "/", "//", "///", "./", "../", "~/", "/workspace/"]),
    st.lists(SEGMENT, max_size=12),
    st.sampled_from(["", "/", "//", "/.", "/..", "/./"]),
)
VERY_LONG = st.builds(
    lambda part, n: part * n, st.sampled_from(["a/", "../", "é/", "ab"]), st.integers(1, 2200)
)
ANY_PATH = st.one_of(SPELLING, st.text(), VERY_LONG)


def outcome(function: Callable[..., str], path: str, cwd: str) -> str | Exception:
    """The path ``function`` makes of ``path``, or what it raised (which is checked)."""
    try:
        return function(path, cwd=cwd)
    except Exception as exc:
        return exc


@settings(max_examples=1500, deadline=None)
@given(path=ANY_PATH, cwd=st.sampled_from(FOLDERS))
@example(path="/workspace/../.env", cwd="/workspace")
@example(path="a//b/./c/../d/", cwd="/workspace")
@example(path="../../..", cwd="/workspace")
@example(path="/" + "é" * 128, cwd="/")
@example(path="caf\udcc3\udca9", cwd="/workspace")
@example(path="~/.ssh/id_rsa", cwd="/srv/project")
def test_where_both_accept_a_spelling_they_agree(path: str, cwd: str) -> None:
    policy = outcome(canonical, path, cwd)
    sandbox = outcome(normalize, path, cwd)
    # each raises only its own error, never an accident (a UnicodeEncodeError, a TypeError)
    assert not isinstance(policy, Exception) or isinstance(policy, PathSpellingError), policy
    assert not isinstance(sandbox, Exception) or isinstance(sandbox, PathEscapeError), sandbox
    if isinstance(sandbox, str):
        assert sandbox == policy, (path, cwd)
        assert normalize(sandbox) == sandbox
        assert "/" + "/".join(split(sandbox)) == sandbox
    elif isinstance(policy, str):
        intended = climbs_above_root(path, cwd) or too_long(path, policy) or has_surrogate(path)
        assert intended, f"the sandbox refused {path!r} for no intended reason: {sandbox}"
    else:  # both refuse: an empty path or a NUL byte, which no file name holds
        assert "\x00" in path or not path.strip()


# -- the intended differences, one by one ------------------------------------------------------


@pytest.mark.parametrize(
    ("path", "cwd", "expected"),
    [
        ("a.txt", "/workspace", "/workspace/a.txt"),
        ("./a/../b/", "/workspace", "/workspace/b"),
        ("../workspace-evil/x", "/workspace", "/workspace-evil/x"),
        ("..", "/workspace", "/"),
        ("~/.ssh/id_rsa", "/workspace", "/workspace/~/.ssh/id_rsa"),
        ("$HOME/.bashrc", "/workspace", "/workspace/$HOME/.bashrc"),
        ("x", "/srv/project", "/srv/project/x"),
        ("x", "/", "/x"),
        (" x", "/workspace", "/workspace/ x"),
        ("//workspace//.env/", "/srv", "/workspace/.env"),
    ],
)
def test_relative_paths_and_odd_spellings_resolve_alike(path: str, cwd: str, expected: str) -> None:
    assert canonical(path, cwd=cwd) == expected
    assert normalize(path, cwd=cwd) == expected


@pytest.mark.parametrize(
    ("path", "cwd", "judged"),
    [
        ("/../etc/passwd", "/workspace", "/etc/passwd"),
        ("../../etc/passwd", "/workspace", "/etc/passwd"),
        ("/workspace/../../.env", "/workspace", "/.env"),
        ("..", "/", "/"),
    ],
)
def test_dotdot_above_the_root_is_judged_by_the_policy_and_refused_by_the_sandbox(
    path: str, cwd: str, judged: str
) -> None:
    assert canonical(path, cwd=cwd) == judged
    with pytest.raises(PathEscapeError, match="climbs above"):
        normalize(path, cwd=cwd)


@pytest.mark.parametrize(
    "path",
    [
        "/workspace/" + "x" * 256,
        "/" + "é" * 128,  # 128 characters, 256 bytes
        "é" * 128,
        "/workspace/" + "a/" * 2100,
    ],
    ids=["ascii-name", "short-absolute-unicode-name", "relative-unicode-name", "whole-path"],
)
def test_too_long_is_refused_by_the_sandbox_only(path: str) -> None:
    assert canonical(path).startswith("/")
    with pytest.raises(PathEscapeError, match="longer than"):
        normalize(path)


def test_a_relative_path_too_long_once_taken_from_the_folder_is_refused_by_the_sandbox() -> None:
    path = "a/" * 2043 + "b"  # 4087 bytes as given; 4098 from /workspace
    assert len(canonical(path)) == 4098
    with pytest.raises(PathEscapeError, match="once taken from /workspace"):
        normalize(path)
    assert normalize(path, cwd="/") == canonical(path, cwd="/") == "/" + path


def test_the_longest_names_are_accepted_by_both() -> None:
    for name in ("x" * 255, "é" * 127):
        assert normalize(f"/workspace/{name}") == canonical(name) == f"/workspace/{name}"


@pytest.mark.parametrize(
    ("path", "refusal"),
    [
        ("/workspace/\ud800", "stands for no byte"),
        ("a\udbff\udfff", "stands for no byte"),
        ("/workspace/caf\udcc3\udca9", "write it as text: '/workspace/café'"),
        ("caf\udcc3\udca9.txt", "write it as text"),
    ],
)
def test_surrogates_that_name_no_bytes_or_a_second_spelling_are_refused_by_the_sandbox(
    path: str, refusal: str
) -> None:
    assert canonical(path) == (path if path.startswith("/") else f"/workspace/{path}")
    with pytest.raises(PathEscapeError, match=refusal):
        normalize(path)


def test_bytes_that_are_not_utf8_keep_their_escaped_spelling_in_both() -> None:
    # b"\xff" and the overlong b"\xc0\xae" are no UTF-8: their escapes are the only spelling
    for name in ("\udcff", "\udcc0\udcae", "x\udcff.txt"):
        assert normalize(name) == canonical(name) == f"/workspace/{name}"


@pytest.mark.parametrize("path", ["", "   ", "\n", "a\x00b", "/workspace/\x00", "\x00"])
def test_both_refuse_what_names_no_file(path: str) -> None:
    with pytest.raises(PathSpellingError):
        canonical(path)
    with pytest.raises(PathEscapeError):
        normalize(path)


@pytest.mark.parametrize("path", [None, b"/workspace/a", 3, ["/workspace"]])
def test_a_path_that_is_not_text_is_a_path_error(path: object) -> None:
    with pytest.raises(PathEscapeError, match="must be text"):
        normalize(path)  # type: ignore[arg-type]
