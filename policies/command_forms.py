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
know is read as a flag, and ``--opt=value`` is one word whatever the option; a wrong guess only
adds a spelling no rule is written for. Options that print something and exit (``--help``,
``--version``) end the reading: no subcommand runs.
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
    none is given (``yarn`` alone installs)."""

    valued: frozenset[str]
    stops: frozenset[str] = _STOPS
    aliases: Mapping[str, tuple[str, ...]] = field(default_factory=dict)
    toolchain: bool = False
    alone: str | None = None


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
        ),
        "docker": Program(
            valued=frozenset(
                {"--context", "-c", "-H", "--host", "--config", "-l", "--log-level"}
                | {"--tlscacert", "--tlscert", "--tlskey"}
            ),
            stops=_STOPS | {"-v"},
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


def _subcommand_at(program: Program, args: tuple[str, ...]) -> int | None:
    """Where the subcommand is in ``args`` (``len(args)`` when there is none), or None when
    no subcommand runs or where it is cannot be told (a stop option, a lone ``--``)."""
    i = 1 if program.toolchain and args and args[0].startswith("+") else 0
    while i < len(args):
        word = args[i]
        if word in program.stops or word == "--":
            return None
        if not word.startswith("-") or word == "-":
            return i
        # a value option skips its value; anything else is one word: a flag, --opt=value,
        # a short option with its value glued on, or an option the table does not know
        i += 2 if word in program.valued else 1
    return len(args)


def normal_forms(name: str, args: tuple[str, ...]) -> list[str]:
    """The extra spellings of the command ``name`` (the program's base name) with ``args``:
    the global options before its subcommand dropped, the subcommand by each of its names,
    the arguments after it unchanged. Empty when the program is not one the table knows or
    nothing would differ from ``name args``."""
    program = PROGRAMS.get(name)
    if program is None:
        return []
    at = _subcommand_at(program, args)
    if at is None:
        return []
    if at < len(args):
        written = args[at]
        rest = args[at + 1 :]
    elif program.alone is not None:
        written, rest = program.alone, ()
    else:
        return []
    bare = " ".join((name, *args))
    forms: dict[str, None] = {}
    for subcommand in (written, *program.aliases.get(written, ())):
        form = " ".join((name, subcommand, *rest))
        if form != bare:
            forms.setdefault(form, None)
    return list(forms)
