"""Commands that can do lasting harm in one line, recognised however they are spelled.

A glob like ``rm -rf *`` misses ``rm -fr``, ``rm -r -f`` and ``rm --recursive --force``, so each
built-in entry is a small check on the parsed command (its base name and arguments, after
wrappers are looked through), not a pattern. A policy keeps the list, drops entries by id, or
adds its own patterns (matched like command rules, on every spelling); the policy's
``dangerous_commands.effect`` is what a match does (ask by default, deny in the presets).
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass

from stockade.policies.command_patterns import CommandPattern
from stockade.policies.shell import CommandLine, SimpleCommand

DOWNLOADERS = frozenset({"curl", "wget", "fetch", "aria2c", "http", "https", "xh"})
INTERPRETERS = frozenset(
    {"sh", "bash", "dash", "zsh", "ksh", "ash", "fish", "python", "python2", "python3"}
    | {"perl", "ruby", "node", "php", "lua", "pwsh", "source", "."}
)


@dataclass(frozen=True, slots=True)
class Danger:
    """A built-in entry: an id (used in ``remove`` and in the decision's rule), why it is
    dangerous, and the check on one command."""

    id: str
    reason: str
    check: Callable[[SimpleCommand], bool]


@dataclass(frozen=True, slots=True)
class Found:
    """A dangerous command in a line: which entry, why, and the command as written."""

    id: str
    reason: str
    command: str


def _flags(command: SimpleCommand) -> tuple[set[str], set[str]]:
    """Short flags (``-rf`` gives r and f) and long ones (``--force``) up to ``--``."""
    short: set[str] = set()
    long: set[str] = set()
    for arg in command.args:
        if arg == "--":
            break
        if arg.startswith("--"):
            long.add(arg[2:].split("=", 1)[0])
        elif arg.startswith("-") and len(arg) > 1:
            short.update(arg[1:])
    return short, long


def _has_long(long: set[str], option: str) -> bool:
    """Whether ``--option`` was given, also as an abbreviation (GNU tools take ``--rec``)."""
    return any(given and option.startswith(given) for given in long)


def _rm_recursive_force(command: SimpleCommand) -> bool:
    if command.name != "rm":
        return False
    short, long = _flags(command)
    recursive = bool(short & {"r", "R"}) or _has_long(long, "recursive")
    return recursive and ("f" in short or _has_long(long, "force"))


def _world_writable(mode: str) -> bool:
    if re.fullmatch(r"0*[0-7]{1,4}", mode):
        return int(mode, 8) & 0o002 != 0
    for clause in mode.split(","):
        found = re.fullmatch(r"([ugoa]*)([-+=])([rwxXst]*)", clause)
        if found and ("a" in found[1] or "o" in found[1]) and found[2] != "-" and "w" in found[3]:
            return True
    return False


def _chmod_recursive_open(command: SimpleCommand) -> bool:
    if command.name != "chmod":
        return False
    short, long = _flags(command)
    recursive = "R" in short or _has_long(long, "recursive")
    return recursive and any(_world_writable(a) for a in command.args if not a.startswith("-"))


def _dd_to_device(command: SimpleCommand) -> bool:
    return command.name == "dd" and any(a.startswith("of=/dev/") for a in command.args)


def _format(command: SimpleCommand) -> bool:
    return command.name.startswith("mkfs") or command.name in {
        "mkswap",
        "wipefs",
        "fdisk",
        "sfdisk",
        "cfdisk",
        "parted",
        "sgdisk",
        "gdisk",
    }


def _power(command: SimpleCommand) -> bool:
    if command.name in {"shutdown", "reboot", "halt", "poweroff"}:
        return True
    if command.name == "systemctl":
        return any(
            a in {"poweroff", "reboot", "halt", "kexec", "soft-reboot"} for a in command.args
        )
    return command.name in {"init", "telinit"} and command.args[:1] in (("0",), ("6",))


def _kill_everything(command: SimpleCommand) -> bool:
    if command.name == "killall5":
        return True
    if command.name != "kill":
        return False
    args = list(command.args)
    if args[:1] in (["-s"], ["-n"]):
        args = args[2:]  # kill -s KILL ...
    elif args[:1] != ["--"] and args[:1] and args[0].startswith("-"):
        args = args[1:]  # kill -9 ... / kill -KILL ...
    return "-1" in args


BUILT_IN: tuple[Danger, ...] = (
    Danger(
        "rm-recursive-force",
        "rm -rf deletes whole trees without asking",
        _rm_recursive_force,
    ),
    Danger(
        "privilege-escalation",
        "runs a command as another user (sudo, doas, su, pkexec)",
        lambda c: c.name in {"sudo", "doas", "su", "pkexec"},
    ),
    Danger("disk-write", "dd writes straight to a device", _dd_to_device),
    Danger("filesystem-format", "formats or repartitions a disk", _format),
    Danger(
        "chmod-recursive-open",
        "chmod -R makes a whole tree writable by everyone",
        _chmod_recursive_open,
    ),
    Danger("power", "shuts down or restarts the machine", _power),
    Danger("kill-everything", "kills every process it can reach", _kill_everything),
)
LINE_CHECKS = ("download-and-run", "dev-tcp")  # judged on the whole line, not one command
BUILT_IN_IDS: tuple[str, ...] = (*(d.id for d in BUILT_IN), *LINE_CHECKS)


@dataclass(frozen=True, slots=True)
class DangerousCommands:
    """The effective list: the built-in entries kept, plus extra patterns."""

    checks: tuple[Danger, ...]
    line_checks: frozenset[str]
    patterns: tuple[CommandPattern, ...]

    def find(self, line: CommandLine) -> Found | None:
        """The first dangerous command in ``line``, if any: the checks on the whole line
        (the more specific ones) come first, then each command."""
        return next(self.every(line), None)

    def every(self, line: CommandLine) -> Iterator[Found]:
        """Each dangerous command in ``line``, in the order `find` looks (for a question that
        must name them all): the whole-line checks, then per command its first built-in entry
        and each extra pattern it matches."""
        if "download-and-run" in self.line_checks:
            found = _download_and_run(line)
            if found is not None:
                yield found
        if "dev-tcp" in self.line_checks:
            for redirect in line.redirects:
                if redirect.target.startswith(("/dev/tcp/", "/dev/udp/")):
                    yield Found(
                        "dev-tcp",
                        "opens a network connection through a /dev/tcp redirection",
                        redirect.target,
                    )
        for command in line.commands:
            if command.opaque or not command.words:
                continue
            for danger in self.checks:
                if danger.check(command):
                    bare = " ".join([command.name, *command.args])
                    yield Found(danger.id, danger.reason, bare)
                    break
            for pattern in self.patterns:
                for spelling in command.spellings():
                    if pattern.match(spelling):
                        yield Found(
                            pattern.pattern,
                            f"matches the dangerous command pattern {pattern.pattern!r}",
                            spelling,
                        )
                        break


def dangerous_commands(
    *, remove: Iterable[str] = (), extend: Iterable[str] = ()
) -> DangerousCommands:
    """The built-in list minus the ids in ``remove``, plus the patterns in ``extend``."""
    removed = set(remove)
    unknown = removed - set(BUILT_IN_IDS)
    if unknown:
        raise ValueError(
            f"cannot remove {', '.join(sorted(map(repr, unknown)))}: no built-in dangerous "
            f"command has that id (ids: {', '.join(BUILT_IN_IDS)})"
        )
    patterns = []
    for pattern in extend:
        if not pattern.strip():
            raise ValueError("an empty dangerous command pattern matches nothing; remove it")
        patterns.append(CommandPattern(pattern))
    return DangerousCommands(
        tuple(d for d in BUILT_IN if d.id not in removed),
        frozenset(LINE_CHECKS) - removed,
        tuple(patterns),
    )


def _download_and_run(line: CommandLine) -> Found | None:
    """A downloader's output run as code: piped into an interpreter, or substituted into
    one's arguments (``bash <(curl x)``, ``sh -c "$(curl x)"``, ``eval "$(wget -O- x)"``)."""
    reason = "runs code downloaded from the network"
    for pipeline in line.pipelines:
        names = [c.name for c in pipeline if c.words]
        if any(n in DOWNLOADERS for n in names) and any(n in INTERPRETERS for n in names):
            return Found("download-and-run", reason, line.text)
    downloads = [c for c in line.commands if c.name in DOWNLOADERS]
    if not downloads:
        return None
    for command in line.commands:
        if command.name in INTERPRETERS or command.name == "eval":
            for word in command.words[1:]:
                if word.dynamic and any(d in word.text for d in DOWNLOADERS):
                    return Found("download-and-run", reason, line.text)
        if command.opaque and command.via and command.via[-1] in INTERPRETERS | {"eval"}:
            return Found("download-and-run", reason, line.text)
    return None
