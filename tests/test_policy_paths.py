"""Path spellings against the policy: a protected file is protected however it is spelt, an
escape is refused however it is spelt, and a legitimate path keeps working.

`canonical` resolves spellings lexically (`..`, `.`, `//`, trailing `/`, relative paths);
`fold` erases case, Unicode compatibility forms and invisible characters for recognising
protected names. Decisions use the default preset, cross-checked with casbin.
"""

from __future__ import annotations

import re

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from stockade.policies import Decision, Effect, PathSpellingError, Policy, Request, canonical, fold

DEFAULT = Policy.preset("default")


def decide(path: str, access: str = "write") -> Decision:
    request = Request("agent", "write_file", paths=[(path, access)])
    decision = DEFAULT.decide(request)
    assert decision == DEFAULT.decide_with_casbin(request), path
    return decision


# -- canonical -------------------------------------------------------------------------------

CANONICAL_CASES = [
    ("absolute", "/workspace/src/a.py", "/workspace/src/a.py"),
    ("relative", "src/a.py", "/workspace/src/a.py"),
    ("dot", ".", "/workspace"),
    ("dot-slash", "./a", "/workspace/a"),
    ("inner-dot", "/workspace/./a/./b", "/workspace/a/b"),
    ("trailing-dot", "/workspace/a/.", "/workspace/a"),
    ("dotdot", "/workspace/a/../b", "/workspace/b"),
    ("relative-dotdot", "src/../.env", "/workspace/.env"),
    ("dotdot-out-of-workspace", "../etc/passwd", "/etc/passwd"),
    ("doubled-slashes", "//workspace//a///b", "/workspace/a/b"),
    ("trailing-slash", "/workspace/a/", "/workspace/a"),
    ("trailing-slashes", "/workspace/a//", "/workspace/a"),
    ("root", "/", "/"),
    ("root-slashes", "///", "/"),
    ("above-root-clamps", "/../../etc", "/etc"),
    ("relative-above-root", "../../../../..", "/"),
    ("dotdot-at-root", "/..", "/"),
    ("tilde-is-a-name", "~/.ssh/id_rsa", "/workspace/~/.ssh/id_rsa"),
    ("tilde-alone", "~", "/workspace/~"),
    ("env-var-is-a-name", "$HOME/.bashrc", "/workspace/$HOME/.bashrc"),
    ("braced-env-var", "${HOME}/x", "/workspace/${HOME}/x"),
    ("unicode-kept", "/workspace/ünïcödé/日本.txt", "/workspace/ünïcödé/日本.txt"),
    ("fullwidth-kept", "．ｅｎｖ", "/workspace/．ｅｎｖ"),
    ("spaces-kept", "my dir/ a b .txt", "/workspace/my dir/ a b .txt"),
    ("three-dots-is-a-name", "/workspace/.../x", "/workspace/.../x"),
    ("dot-prefixed-names", "/workspace/..a/.b", "/workspace/..a/.b"),
    ("case-kept", "/Workspace/A", "/Workspace/A"),
]


@pytest.mark.parametrize(
    ("path", "expected"),
    [case[1:] for case in CANONICAL_CASES],
    ids=[case[0] for case in CANONICAL_CASES],
)
def test_canonical(path: str, expected: str) -> None:
    assert canonical(path) == expected


def test_canonical_relative_to_another_folder() -> None:
    assert canonical("brief.md", cwd="/userinput") == "/userinput/brief.md"
    assert canonical("../workspace/a", cwd="/userinput") == "/workspace/a"
    assert canonical("/abs", cwd="/userinput") == "/abs"


@pytest.mark.parametrize(
    "path",
    ["", "a\x00b", "\x00", "/workspace/.env\x00.txt", "   "],
    ids=["empty", "nul", "only-nul", "nul-suffix", "blank"],
)
def test_canonical_refuses_paths_that_name_no_file(path: str) -> None:
    with pytest.raises(PathSpellingError) as caught:
        canonical(path)
    assert isinstance(caught.value, ValueError)


def test_canonical_refuses_non_strings() -> None:
    with pytest.raises(PathSpellingError, match="bytes"):
        canonical(b"/workspace/a")


FOLD_CASES = [
    ("ascii-upper", "/workspace/.ENV", "/workspace/.env"),
    ("fullwidth", "．ｅｎｖ", ".env"),
    ("fullwidth-upper", ".ＥＮＶ", ".env"),
    ("zero-width-space", ".e\u200bnv", ".env"),
    ("soft-hyphen", ".en\u00adv", ".env"),
    ("bom", "\ufeff.env", ".env"),
    ("math-bold", ".𝐞𝐧𝐯", ".env"),
    ("circled", ".ⓔⓝⓥ", ".env"),
    ("kelvin-sign", "\u212a", "k"),
    ("sharp-s", "Straße", "strasse"),
    ("composed", "e\u0301", "\u00e9"),
]


@pytest.mark.parametrize(
    ("path", "expected"),
    [case[1:] for case in FOLD_CASES],
    ids=[case[0] for case in FOLD_CASES],
)
def test_fold(path: str, expected: str) -> None:
    assert fold(path) == expected


# -- one protected file, many spellings ------------------------------------------------------

ENV_SPELLINGS = [
    ("canonical", "/workspace/.env"),
    ("relative", ".env"),
    ("dot-slash", "./.env"),
    ("dotdot", "src/../.env"),
    ("deep-dotdot", "a/b/c/../../../.env"),
    ("doubled-slashes", "//workspace//.env"),
    ("trailing-slash", "/workspace/.env/"),
    ("inner-dot", "/workspace/./.env"),
    ("upper", ".ENV"),
    ("mixed-case", ".Env"),
    ("absolute-upper", "/workspace/.eNv"),
    ("fullwidth", "．ｅｎｖ"),
    ("fullwidth-name-only", ".ｅｎｖ"),
    ("fullwidth-upper", ".ＥＮＶ"),
    ("zero-width-space", ".e\u200bnv"),
    ("zero-width-joiner", ".en\u200dv"),
    ("trailing-zero-width", ".env\u200b"),
    ("soft-hyphen", ".en\u00adv"),
    ("word-joiner", ".\u2060env"),
    ("math-bold", ".𝐞𝐧𝐯"),
    ("circled", ".ⓔⓝⓥ"),
    ("superscript-e", ".\u1d49nv"),
]


@pytest.mark.parametrize(
    "path", [case[1] for case in ENV_SPELLINGS], ids=[case[0] for case in ENV_SPELLINGS]
)
@pytest.mark.parametrize("access", ["read", "write", "delete"])
def test_every_spelling_of_a_protected_file_is_protected(path: str, access: str) -> None:
    reference = decide("/workspace/.env", access)
    decision = decide(path, access)
    assert (decision.effect, decision.rule) == (Effect.ASK, "dangerous-path")
    assert (decision.effect, decision.rule, decision.reason) == (
        reference.effect,
        reference.rule,
        reference.reason,
    )
    assert decision.target == canonical(path)


PROTECTED_SPELLINGS = [
    ("tilde-ssh", "~/.ssh/id_rsa"),
    ("home-var-ssh", "$HOME/.ssh/id_rsa"),
    ("upper-ssh", "/workspace/.SSH/id_rsa"),
    ("fullwidth-ssh", "/workspace/.ｓｓｈ/id_rsa"),
    ("git-hooks-case", ".Git/HOOKS/pre-commit"),
    ("git-dotdot", "src/../.git/hooks/pre-commit"),
    ("env-production-upper", "/workspace/app/.ENV.PRODUCTION"),
    ("bashrc-fullwidth", "/workspace/．ｂａｓｈｒｃ"),
    ("aws-trailing-slash", "/workspace/.aws/"),
    ("vscode-nested", "pkg//sub/./.VSCode/settings.json"),
]


@pytest.mark.parametrize(
    "path",
    [case[1] for case in PROTECTED_SPELLINGS],
    ids=[case[0] for case in PROTECTED_SPELLINGS],
)
def test_other_protected_spellings(path: str) -> None:
    decision = decide(path, "read")
    assert (decision.effect, decision.rule) == (Effect.ASK, "dangerous-path")


def test_tilde_resolves_under_the_workspace_and_stays_protected() -> None:
    decision = decide("~/.ssh/id_rsa", "read")
    assert decision.target == "/workspace/~/.ssh/id_rsa"
    assert decision.rule == "dangerous-path"


@pytest.mark.parametrize(
    "path",
    ["a\x00b", "/workspace/.env\x00", "\x00", ""],
    ids=["nul-inside", "nul-after-env", "only-nul", "empty"],
)
def test_unnameable_paths_are_denied(path: str) -> None:
    decision = decide(path)
    assert (decision.effect, decision.rule) == (Effect.DENY, "path-spelling")
    assert decision.reason


def test_one_bad_path_denies_the_whole_call() -> None:
    request = Request(
        "agent", "write_file", paths=[("/workspace/ok.txt", "write"), ("x\x00", "write")]
    )
    assert DEFAULT.decide(request).rule == "path-spelling"


ESCAPES = [
    ("relative-dotdot", "../../etc/passwd"),
    ("absolute-dotdot", "/workspace/../etc/passwd"),
    ("userinput-dotdot", "/userinput/../../etc/shadow"),
    ("deep-dotdot", "src/a/../../../root/.profile"),
    ("doubled-slash-root", "//etc/passwd"),
    ("prefix-confusion", "/workspace-evil/x"),
    ("prefix-confusion-dotdot", "/workspace/../workspace-evil/x"),
    ("case-of-namespace", "/WORKSPACE/x"),
    ("plain-outside", "/tmp/x"),
    ("root-itself", "/"),
]


@pytest.mark.parametrize("path", [case[1] for case in ESCAPES], ids=[case[0] for case in ESCAPES])
def test_escapes_are_denied(path: str) -> None:
    for access in ("read", "write"):
        decision = decide(path, access)
        assert (decision.effect, decision.rule) == (Effect.DENY, "outside-namespaces")


LEGITIMATE = [
    ("spaces", "my notes/draft 1.txt"),
    ("leading-space", " leading.txt"),
    ("unicode", "docs/naïve café.md"),
    ("cjk", "日本語/ファイル.py"),
    ("emoji", "art/🎨.png"),
    ("gitignore", ".gitignore"),
    ("editorconfig", ".editorconfig"),
    ("github-workflow", ".github/workflows/ci.yml"),
    ("prettierrc", ".prettierrc"),
    ("hidden-folder", "src/.cache/x"),
    ("fullwidth-letters-not-protected", "ｓｒｃ/ｍａｉｎ.py"),
    ("tilde-file", "~notes.txt"),
    ("dollar-file", "$price.csv"),
    ("userinput-read", "/userinput/brief.md"),
    ("dotdot-back-inside", "/workspace/src/../docs/a.md"),
    ("workspace-itself", "/workspace"),
]


@pytest.mark.parametrize(
    "path", [case[1] for case in LEGITIMATE], ids=[case[0] for case in LEGITIMATE]
)
def test_legitimate_paths_keep_working(path: str) -> None:
    access = "read" if path.startswith("/userinput") else "write"
    decision = decide(path, access)
    assert (decision.effect, decision.rule) == (Effect.ALLOW, "workspace-files")


# -- properties ------------------------------------------------------------------------------

SEGMENT = st.sampled_from(
    ["", ".", "..", "...", "a", "b.c", ".env", "~", "$HOME", "ü", " x", "WORKSPACE", "ｅ"]
)
SPELLING = st.builds(
    lambda lead, segments, trail: lead + "/".join(segments) + trail,
    st.sampled_from(["", "/", "//", "./", "../"]),
    st.lists(SEGMENT, max_size=8),
    st.sampled_from(["", "/", "//", "/."]),
)
ANY_PATH = st.one_of(SPELLING, st.text(min_size=1, max_size=40))


@settings(max_examples=400, deadline=None)
@given(ANY_PATH)
def test_canonical_is_idempotent_and_clean(path: str) -> None:
    try:
        result = canonical(path)
    except PathSpellingError:
        assert "\x00" in path or not path.strip()
        return
    assert result.startswith("/")
    assert "//" not in result
    assert "/./" not in result
    assert not result.endswith("/.")
    assert "/../" not in result
    assert not result.endswith("/..")
    assert result == "/" or not result.endswith("/")
    assert canonical(result) == result
    assert canonical(result, cwd="/elsewhere") == result


NAMES = ["src", "docs", "a b", "ünï", "main.py", "notes.md", "build", "x.PY", "~", "$HOME"]
PROTECTED = [".env", ".ssh", ".git", ".bashrc", ".aws", ".env.local", ".vscode", ".npmrc"]
ROOTS = ["/workspace", "/userinput", "/etc", "/workspace-evil", "/"]


@st.composite
def protected_spelling(draw: st.DrawFn) -> tuple[str, str]:
    """A canonical path and another spelling of it."""
    root = draw(st.sampled_from(ROOTS))
    segments = draw(st.lists(st.sampled_from(NAMES + PROTECTED), max_size=5))
    parts = [p for p in root.split("/") if p] + segments
    path = "/" + "/".join(parts)
    spelt = list(parts)
    for _ in range(draw(st.integers(1, 4))):
        where = draw(st.integers(0, len(spelt)))
        kind = draw(st.sampled_from(["dot", "dotdot", "slash", "case"]))
        if kind == "dot":
            spelt.insert(where, ".")
        elif kind == "dotdot":
            spelt[where:where] = [draw(st.sampled_from(NAMES)), ".."]
        elif kind == "slash":
            spelt.insert(where, "")
        else:
            indexes = [i for i, p in enumerate(spelt) if p in PROTECTED or p.lower() in PROTECTED]
            if indexes:
                i = draw(st.sampled_from(indexes))
                flips = draw(
                    st.lists(st.booleans(), min_size=len(spelt[i]), max_size=len(spelt[i]))
                )
                spelt[i] = "".join(
                    ch.upper() if flip else ch.lower()
                    for ch, flip in zip(spelt[i], flips, strict=True)
                )
    other = "/" + "/".join(spelt) + draw(st.sampled_from(["", "/", "/."]))
    relative = re.match(r"/+workspace/+(?=[^/])", other)
    if relative and path.startswith("/workspace/") and draw(st.booleans()):
        other = other[relative.end() :]  # the same file, relative to /workspace
    return path, other


@settings(max_examples=300, deadline=None)
@given(protected_spelling())
def test_spelling_never_changes_a_decision(case: tuple[str, str]) -> None:
    path, other = case
    assert canonical(other).lower() == path.lower()
    expected = DEFAULT.decide(Request("agent", "write_file", paths=[(path, "write")]))
    got = DEFAULT.decide(Request("agent", "write_file", paths=[(other, "write")]))
    assert (got.effect, got.rule) == (expected.effect, expected.rule), (path, other)


@settings(max_examples=400, deadline=None)
@given(st.text(max_size=30))
def test_fold_is_idempotent(path: str) -> None:
    once = fold(path)
    assert fold(once) == once


@settings(max_examples=200, deadline=None)
@given(st.text(alphabet=st.characters(codec="ascii"), max_size=30))
def test_fold_of_ascii_is_lower_case(path: str) -> None:
    assert fold(path) == path.lower()


@settings(max_examples=200, deadline=None)
@given(
    st.sampled_from(PROTECTED),
    st.lists(st.sampled_from(["", "\u200b", "\u00ad", "\u2060", "\ufeff"]), min_size=1),
)
def test_invisible_characters_never_unprotect_a_name(name: str, invisibles: list[str]) -> None:
    # scatter invisible format characters through a protected name
    spelt = "".join(
        ch + (invisibles[i % len(invisibles)] if i < len(name) - 1 else "")
        for i, ch in enumerate(name)
    )
    assert re.sub("[\u200b\u00ad\u2060\ufeff]", "", spelt) == name
    assert fold(spelt) == name
    # (a path named .git is protected against changes only: git reads its own folder)
    decision = decide(f"/workspace/pkg/{spelt}", "write" if name == ".git" else "read")
    assert decision.rule == "dangerous-path"
