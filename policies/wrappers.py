"""Programs that run another program, and where in their arguments that program is.

``sudo -u root rm -rf /`` runs ``rm``; ``find . -exec rm {} ;`` runs ``rm`` once per file;
``bash -c 'rm -rf /'`` runs a whole shell line, and so does ``git -c 'alias.x=!rm -rf /' x``.
Each wrapper here is described by its options (which take a value, so the value is not
mistaken for the command) and by what follows them: the command's words, a shell line to
parse, or a positional argument first (``timeout 5 cmd``).
A payload only known at run time (``bash -c "$X"``, ``eval $X``) makes the command opaque.
"""

from __future__ import annotations

import shlex
from collections.abc import Sequence
from dataclasses import dataclass

from stockade.policies.words import Word

SHELLS = frozenset({"sh", "bash", "dash", "zsh", "ksh", "ash", "mksh", "yash", "fish"})


@dataclass(frozen=True, slots=True)
class Wrapped:
    """What a wrapper runs: commands (``runs``), shell lines (``scripts``), or why that cannot
    be known (``opaque``). ``assignments`` are ``env``'s ``NAME=value`` words."""

    runs: tuple[tuple[Word, ...], ...] = ()
    scripts: tuple[str, ...] = ()
    assignments: tuple[str, ...] = ()
    opaque: str | None = None


@dataclass(frozen=True, slots=True)
class _Options:
    """A wrapper's command line: options taking a value, options meaning "no command runs",
    and how many positional words come before the command."""

    valued: frozenset[str] = frozenset()
    stop: frozenset[str] = frozenset()
    positional: int = 0


def _opts(valued: str = "", stop: str = "", positional: int = 0) -> _Options:
    return _Options(frozenset(valued.split()), frozenset(stop.split()), positional)


_WRAPPERS: dict[str, _Options] = {
    "sudo": _opts(
        "-u -g -C -D -h -p -r -t -T -U --user --group --close-from --chdir --host --prompt "
        "--role --type --command-timeout --other-user",
        "-e --edit -l --list -v --validate -k -K --remove-timestamp -V --version",
    ),
    "doas": _opts("-u -C", "-L"),
    "pkexec": _opts("--user"),
    "nice": _opts("-n --adjustment"),
    "nohup": _opts(),
    "setsid": _opts(),
    "time": _opts("-f -o --format --output"),
    "command": _opts("", "-v -V"),
    "builtin": _opts(),
    "exec": _opts("-a"),
    "stdbuf": _opts("-i -o -e --input --output --error"),
    "ionice": _opts("-c -n --class --classdata", "-p --pid -P --pgid -u --uid"),
    "chrt": _opts("", "-p --pid", positional=1),
    "taskset": _opts("", "-p --pid", positional=1),
    "timeout": _opts("-s -k --signal --kill-after", positional=1),
    "chroot": _opts("--userspec --groups", positional=1),
    "unshare": _opts("--map-user --map-group --setuid --setgid --wd --root"),
    "nsenter": _opts("-t --target -S --setuid -G --setgid --wd --root"),
    "busybox": _opts(),
    "coproc": _opts(),
    "strace": _opts("-o -e -p -s -u -E --output"),
    "ltrace": _opts("-o -e -p -s -u"),
    "caffeinate": _opts("-t -w"),
    "torsocks": _opts(),
    "proxychains": _opts("-f"),
    "proxychains4": _opts("-f"),
}


def unwrap(name: str, args: Sequence[Word]) -> Wrapped | None:
    """What ``name args...`` runs besides itself, or None when it runs nothing else."""
    if name in SHELLS:
        return _shell(args)
    if name == "eval":
        return _script(args, "eval")
    if name == "su":
        return _su(args)
    if name == "env":
        return _env(args)
    if name == "xargs":
        return _xargs(args)
    if name in ("find", "fd", "fdfind"):
        return _find(args)
    if name == "watch":
        return _watch(args)
    if name == "flock":
        return _flock(args)
    if name == "script":
        return _su(args)  # `script -c STRING` runs STRING with a shell, like `su -c`
    if name == "parallel":
        return _parallel(args)
    if name == "git":
        return _git_alias(args)
    if name == "nice" and args and _is_number(args[0].text.lstrip("-")) and args[0].static:
        args = args[1:]  # `nice -10 cmd`
    options = _WRAPPERS.get(name)
    if options is None:
        return None
    rest = _after_options(args, options)
    if rest is None:
        return None
    if isinstance(rest, str):
        return Wrapped(opaque=rest)
    return Wrapped(runs=(tuple(rest),)) if rest else None


def _after_options(args: Sequence[Word], options: _Options) -> list[Word] | str | None:
    """The words after the options and positionals: the command. None when no command runs;
    a reason when which one is only known at run time."""
    i = 0
    while i < len(args):
        word = args[i]
        text = word.text
        if not word.static and text.startswith("-"):
            return f"an option {text!r} known only at run time"
        if text == "--":
            i += 1
            break
        if not text.startswith("-") or text == "-":
            break
        key = text.split("=", 1)[0]
        if key in options.stop:
            return None
        if key in options.valued and "=" not in text:
            i += 2
            continue
        # a short option with its value attached (-uroot, -oL) or a cluster of flags
        i += 1
    i += options.positional
    return list(args[i:]) if i < len(args) else None


def _shell(args: Sequence[Word]) -> Wrapped | None:
    """``bash [options] -c STRING [name [args...]]``: STRING is a shell line."""
    command_string = False
    i = 0
    while i < len(args):
        word = args[i]
        text = word.text
        if not word.static and text.startswith(("-", "+")):
            return Wrapped(opaque=f"an option {text!r} known only at run time")
        if text in ("-o", "+o", "-O", "+O", "--rcfile", "--init-file"):
            i += 2
            continue
        if text == "--" or text == "-":
            i += 1
            break
        if text.startswith("--"):
            i += 1
            continue
        if text.startswith(("-", "+")) and len(text) > 1:
            command_string = command_string or "c" in text[1:]
            i += 1
            continue
        break
    if not command_string:
        return None  # a script file or standard input: its text is not on the line
    if i >= len(args):
        return Wrapped(opaque="-c without a command string")
    return _script(args[i : i + 1], "-c")


def _script(args: Sequence[Word], what: str) -> Wrapped:
    # an unquoted glob in the string is read again as shell, where it is a glob again
    if any(w.dynamic for w in args):
        return Wrapped(opaque=f"a {what} string known only at run time")
    return Wrapped(scripts=(" ".join(w.text for w in args),))


def _su(args: Sequence[Word]) -> Wrapped | None:
    """``su -c STRING`` (and ``script -c STRING``): STRING is a shell line."""
    for i, word in enumerate(args):
        text = word.text
        # -c, or a cluster ending in it (script -qc, su -lc): the next word is the command
        clustered = text.startswith("-") and not text.startswith("--") and text.endswith("c")
        if (clustered or text == "--command") and i + 1 < len(args):
            return _script(args[i + 1 : i + 2], "su -c")
        if word.text.startswith("--command="):
            return _script([Word(word.text.split("=", 1)[1], word.dynamic)], "su -c")
    return None


def _env(args: Sequence[Word]) -> Wrapped | None:
    assignments: list[str] = []
    i = 0
    while i < len(args):
        word = args[i]
        text = word.text
        if text in ("-S", "--split-string") or text.startswith(("-S", "--split-string=")):
            if text in ("-S", "--split-string"):
                payload = list(args[i + 1 : i + 2])
            else:
                value = text[2:] if text.startswith("-S") else text.split("=", 1)[1]
                payload = [Word(value, word.dynamic, word.pattern)]
            if not payload:
                return Wrapped(opaque="-S without a string")
            rest = " ".join(w.text for w in args[i + 2 :])
            found = _script(payload, "env -S")
            if found.opaque:
                return found
            return Wrapped(scripts=(f"{found.scripts[0]} {rest}".strip(),))
        if not word.static and (text.startswith("-") or "=" in text.split("$", 1)[0]):
            return Wrapped(opaque=f"an argument {text!r} known only at run time")
        if text in ("-u", "--unset", "-C", "--chdir"):
            i += 2
            continue
        if text == "--":
            i += 1
            continue
        if text.startswith("-") and text != "-":
            i += 1
            continue
        if "=" in text and not text.startswith("="):
            assignments.append(text)
            i += 1
            continue
        break
    if i >= len(args):
        return None
    return Wrapped(runs=(tuple(args[i:]),), assignments=tuple(assignments))


_XARGS_VALUED = _opts(
    "-I -L -l -n -P -s -d -E -e -a --arg-file --delimiter --max-args --max-procs "
    "--max-chars --replace --max-lines --eof --process-slot-var"
).valued


def _xargs(args: Sequence[Word]) -> Wrapped:
    i = 0
    while i < len(args):
        text = args[i].text
        if text == "--":
            i += 1
            break
        if not text.startswith("-") or text == "-":
            break
        if text in _XARGS_VALUED:  # attached values (-I{}, --max-args=2) are one word
            i += 2
            continue
        i += 1
    if i >= len(args):
        return Wrapped(runs=((Word("echo"),),))  # xargs without a command runs echo
    return Wrapped(runs=(tuple(args[i:]),))


def _find(args: Sequence[Word]) -> Wrapped | None:
    runs: list[tuple[Word, ...]] = []
    i = 0
    while i < len(args):
        if args[i].text in ("-exec", "-execdir", "-ok", "-okdir", "-x", "--exec"):
            start = i + 1
            end = start
            while end < len(args) and args[end].text not in (";", "+"):
                end += 1
            if end > start:
                runs.append(tuple(args[start:end]))
            i = end + 1
            continue
        i += 1
    return Wrapped(runs=tuple(runs)) if runs else None


def _watch(args: Sequence[Word]) -> Wrapped | None:
    exec_mode = False
    i = 0
    while i < len(args):
        text = args[i].text
        if text in ("-n", "--interval", "-d", "--differences", "-q", "--equexit"):
            # -d may have an optional attached value; separate values are numbers
            i += 2 if text in ("-n", "--interval") else 1
            continue
        if text in ("-x", "--exec"):
            exec_mode = True
            i += 1
            continue
        if text.startswith("-") and text != "-":
            i += 1
            continue
        break
    if i >= len(args):
        return None
    if exec_mode:
        return Wrapped(runs=(tuple(args[i:]),))
    return _script(args[i:], "watch")  # watch joins its arguments and runs them with sh -c


def _flock(args: Sequence[Word]) -> Wrapped | None:
    i = 0
    while i < len(args) and args[i].text.startswith("-"):
        text = args[i].text
        if text in ("-w", "--timeout", "-E", "--conflict-exit-code"):
            i += 2
            continue
        i += 1
    i += 1  # the lock file or descriptor
    if i >= len(args):
        return None
    if args[i].text in ("-c", "--command"):
        return _script(args[i + 1 : i + 2], "flock -c")
    return Wrapped(runs=(tuple(args[i:]),))


_PARALLEL_VALUED = _opts(
    "-j -n -N -S -a -d -I -L -E --jobs --max-args --sshlogin --arg-file --delimiter "
    "--timeout --delay --joblog --results --tmpdir --workdir --colsep"
).valued


def _parallel(args: Sequence[Word]) -> Wrapped | None:
    """GNU parallel runs the words before ``:::`` through a shell, once per argument."""
    i = 0
    while i < len(args) and args[i].text.startswith("-") and args[i].text not in (":::", "::::"):
        i += 2 if args[i].text in _PARALLEL_VALUED else 1
    end = i
    while end < len(args) and args[end].text not in (":::", "::::", ":::+"):
        end += 1
    if end == i:
        return None  # commands read from standard input
    return _script(args[i:end], "parallel")


def _git_alias(args: Sequence[Word]) -> Wrapped | None:
    """``git -c alias.NAME=VALUE NAME args``: git runs VALUE instead of NAME, a shell line when
    it starts with ``!``, else git with VALUE's words (``-c alias.p=push p`` is ``git push``)."""
    from stockade.policies.command_forms import PROGRAMS  # (it imports nothing of this)

    valued = PROGRAMS["git"].valued
    aliases: dict[str, str] = {}
    i = 0
    while i < len(args):
        text = args[i].text
        if text in ("-c", "--config-env") and i + 1 < len(args):
            key, _, body = args[i + 1].text.partition("=")
            if key.lower().startswith("alias."):
                if not args[i + 1].static or text == "--config-env":
                    return Wrapped(opaque="a git alias known only at run time")
                aliases[key[len("alias.") :].lower()] = body
            i += 2
        elif text.startswith("--config-env=") and "alias." in text.lower():
            return Wrapped(opaque="a git alias known only at run time")
        elif text in valued:
            i += 2
        elif text.startswith("-"):
            i += 1
        else:
            break
    if i >= len(args) or args[i].text.lower() not in aliases:
        return None
    rest = args[i + 1 :]
    if not all(w.static for w in rest):
        return Wrapped(opaque="a git alias given words known only at run time")
    body = aliases[args[i].text.lower()]
    tail = " ".join(shlex.quote(w.text) for w in rest)
    line = body[1:] if body.startswith("!") else f"git {body}"
    return Wrapped(scripts=(f"{line} {tail}".rstrip(),))


def _is_number(text: str) -> bool:
    return text.isdigit()
