"""The normal forms of a command: how rules also see ``git -C . push`` and ``npm i lodash``.

A rule written for ``git push *`` or ``npm install *`` means the program doing that, however it
is asked to. Two spellings slipped past such rules: global options between the program and its
subcommand (``git -C . push``, ``npm --prefix x install``, ``kubectl -n prod delete ...``) and
the subcommand's other names (``npm i``, ``npm rm``, ``pnpm un``). `normal_forms` gives a
command's extra spellings with those options dropped and the subcommand by each name it has;
the arguments after the subcommand are kept as they are (options there belong to the
subcommand). ``npm ci`` is also spelled ``npm install``: it installs packages and runs their
scripts, so a rule about installs must see it.

The table is hand-written: each program's options are its own, and reading an option that
takes a value as a flag would take its value for the subcommand. An option the table does not
know is read both ways, as a flag and as taking the next word (``npm --cafile x install``), and
``--opt=value`` is one word whatever the option: an extra spelling only ever makes a decision
stricter (one no rule names says nothing), so a wrong guess costs at most a question, while a
missed reading would let the command slip past the rule. Options that print something and exit
(``--help``, ``--version``) end the reading: no subcommand runs. docker's management commands
are read as the short ones (``docker container run`` is also ``docker run``), and cargo's
built-in aliases as what they mean (``cargo r`` is ``cargo run``).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from types import MappingProxyType

_STOPS = frozenset({"--help", "-h", "--version"})


@dataclass(frozen=True, slots=True)
class Program:
    """What a program takes before its subcommand, and its subcommands' other names.

    ``valued`` options take the next word as their value; ``stops`` print and exit;
    ``aliases`` give a subcommand the names it is also spelled by (canonical first);
    ``toolchain`` allows cargo's leading ``+nightly``; ``alone`` is the subcommand run when
    none is given (``yarn`` alone installs); ``flags`` take no value for sure; ``groups`` are
    management commands whose own subcommand is also a short one (``container rm``: ``rm``;
    a name missing from the map is the same name)."""

    valued: frozenset[str]
    stops: frozenset[str] = _STOPS
    aliases: Mapping[str, tuple[str, ...]] = field(default_factory=dict)
    toolchain: bool = False
    alone: str | None = None
    flags: frozenset[str] = frozenset()  # options known to take no value (read one way only)
    groups: Mapping[str, Mapping[str, str]] = field(default_factory=dict)  # docker container ...


def _names(*spellings: str, means: tuple[str, ...]) -> dict[str, tuple[str, ...]]:
    return dict.fromkeys(spellings, means)


_NPM_ALIASES = {
    **_names(
        *("i", "in", "ins", "inst", "insta", "instal", "isnt", "isnta", "isntal", "isntall"),
        "add",
        means=("install",),
    ),
    # ci installs too: spelled as itself and as an install
    "ci": ("install",),
    **_names("clean-install", "ic", "install-clean", "isntall-clean", means=("ci", "install")),
    **_names("rm", "r", "un", "remove", "unlink", means=("uninstall",)),
    **_names("t", "tst", means=("test",)),
    **_names("run-script", "rum", "urn", means=("run",)),
    "x": ("exec",),
    **_names("up", "upgrade", "udpate", means=("update",)),
    # install-test installs, then tests
    "install-test": ("install", "test"),
    "it": ("install-test", "install", "test"),
    "install-ci-test": ("ci", "install", "test"),
    **_names(
        "cit", "sit", "clean-install-test", means=("install-ci-test", "ci", "install", "test")
    ),
}

_PNPM_ALIASES = {
    "i": ("install",),
    "add": ("install",),  # installs the packages it names
    **_names("rm", "un", "uninstall", means=("remove",)),
    **_names("t", "tst", means=("test",)),
    "run-script": ("run",),
    **_names("up", "upgrade", means=("update",)),
    "install-test": ("install", "test"),
    "it": ("install-test", "install", "test"),
}

PROGRAMS: Mapping[str, Program] = MappingProxyType(
    {
        "git": Program(
            valued=frozenset(
                {"-C", "-c", "--git-dir", "--work-tree", "--namespace", "--config-env"}
                | {"--super-prefix", "--attr-source"}
            ),
            # --exec-path alone prints the path and exits; --exec-path=dir is one word
            stops=_STOPS
            | {"-v", "--exec-path", "--html-path", "--man-path", "--info-path", "--list-cmds"},
            flags=frozenset(
                {"-P", "-p", "--no-pager", "--paginate", "--bare", "--no-replace-objects"}
                | {"--literal-pathspecs", "--glob-pathspecs", "--noglob-pathspecs"}
                | {"--icase-pathspecs", "--no-optional-locks", "--no-lazy-fetch", "--no-advice"}
            ),
        ),
        "npm": Program(
            valued=frozenset(
                {"--prefix", "-C", "--loglevel", "-w", "--workspace", "--registry", "--cache"}
                | {"--userconfig", "--globalconfig", "--location", "--scope", "--tag", "--otp"}
                | {"--omit", "--include", "--script-shell"}
            ),
            stops=_STOPS | {"-v"},
            aliases=MappingProxyType(_NPM_ALIASES),
        ),
        "pnpm": Program(
            valued=frozenset(
                {"-C", "--dir", "--filter", "-F", "--filter-prod", "--loglevel", "--reporter"}
                | {"--store-dir", "--global-dir", "--modules-dir", "--workspace-concurrency"}
            ),
            stops=_STOPS | {"-v"},
            aliases=MappingProxyType(_PNPM_ALIASES),
        ),
        "yarn": Program(
            valued=frozenset(
                {"--cwd", "--cache-folder", "--global-folder", "--modules-folder", "--mutex"}
                | {"--network-timeout", "--network-concurrency", "--registry", "--link-folder"}
                | {"--preferred-cache-folder", "--use-yarnrc", "--proxy", "--https-proxy"}
            ),
            stops=_STOPS | {"-v"},
            aliases=MappingProxyType({"add": ("install",)}),
            alone="install",
        ),
        "cargo": Program(
            valued=frozenset({"-C", "--color", "-Z", "--config"}),
            stops=_STOPS | {"-V", "--list", "--explain"},
            toolchain=True,
            aliases=MappingProxyType(
                {"b": ("build",), "c": ("check",), "d": ("doc",), "t": ("test",)}
                | {"r": ("run",), "rm": ("remove",)}
            ),
            flags=frozenset({"-q", "--quiet", "-v", "--verbose", "--locked", "--offline"})
            | {"--frozen"},
        ),
        "docker": Program(
            valued=frozenset(
                {"--context", "-c", "-H", "--host", "--config", "-l", "--log-level"}
                | {"--tlscacert", "--tlscert", "--tlskey"}
            ),
            stops=_STOPS | {"-v"},
            flags=frozenset({"-D", "--debug", "--tls", "--tlsverify"}),
            groups=MappingProxyType(
                {
                    "container": MappingProxyType({"ls": "ps", "list": "ps"}),
                    "image": MappingProxyType({"ls": "images", "list": "images", "rm": "rmi"}),
                }
            ),
        ),
        "kubectl": Program(
            valued=frozenset(
                {"-n", "--namespace", "--context", "--kubeconfig", "--cluster", "--user"}
                | {"-s", "--server", "--token", "--as", "--as-group", "--as-uid", "-v", "--v"}
                | {"--request-timeout", "--cache-dir", "--certificate-authority"}
                | {"--client-certificate", "--client-key", "--tls-server-name"}
                | {"--username", "--password", "--log-file", "--vmodule"}
            ),
        ),
    }
)


def _subcommand_at(program: Program, args: tuple[str, ...]) -> list[int]:
    """Where the subcommand may be in ``args`` (``len(args)``: none given), each reading of
    the options before it once; empty when no subcommand runs (a stop option, a lone ``--``)."""
    start = 1 if program.toolchain and args and args[0].startswith("+") else 0
    found: dict[int, None] = {}
    frontier, seen = [start], {start}
    while frontier:
        i = frontier.pop()
        if i >= len(args):
            found.setdefault(len(args), None)
            continue
        word = args[i]
        if word in program.stops or word == "--":
            continue
        if not word.startswith("-") or word == "-":
            found.setdefault(i, None)
            continue
        # a value option skips its value; a known flag, --opt=value or a short option with its
        # value glued on is one word; an option the table does not know is read both ways
        steps: tuple[int, ...] = (2,) if word in program.valued else (1,)
        if word not in program.valued and word not in program.flags and "=" not in word:
            steps = (1, 2) if word.startswith("--") or len(word) == 2 else (1,)
        for step in steps:
            if i + step not in seen:
                seen.add(i + step)
                frontier.append(i + step)
    return sorted(found)


def normal_forms(name: str, args: tuple[str, ...]) -> list[str]:
    """The extra spellings of the command ``name`` (the program's base name) with ``args``:
    the global options before its subcommand dropped, the subcommand by each of its names,
    the arguments after it unchanged. Empty when the program is not one the table knows or
    nothing would differ from ``name args``."""
    program = PROGRAMS.get(name)
    if program is None:
        return []
    bare = " ".join((name, *args))
    forms: dict[str, None] = {}
    for at in _subcommand_at(program, args):
        if at < len(args):
            written, rest = args[at], args[at + 1 :]
        elif program.alone is not None:
            written, rest = program.alone, ()
        else:
            continue
        group = program.groups.get(written)
        if group is not None and rest:  # `docker container rm x` is also `docker rm x`
            spoken = (written, rest[0]), (group.get(rest[0], rest[0]),)
            words = [(*spoken[0], *rest[1:]), (*spoken[1], *rest[1:])]
        else:
            words = [(each, *rest) for each in (written, *program.aliases.get(written, ()))]
        for said in words:
            form = " ".join((name, *said))
            if form != bare:
                forms.setdefault(form, None)
    return list(forms)
