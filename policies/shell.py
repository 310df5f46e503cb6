"""A command line read the way bash reads it, so each command in it can be judged.

``git status && rm -rf /`` runs two programs, ``echo $(curl x | sh)`` runs three, and
``bash -c 'rm -rf /'`` runs the one inside the string. The line is parsed with the
tree-sitter bash grammar (a real parser, not a regex), and every simple command found anywhere in
the tree is collected: in lists and pipelines, subshells and groups, ``$(...)``, backticks,
``<(...)``, ``if``/``for``/``while``/``case`` bodies, function bodies and command substitutions
inside strings and heredocs.

Words are unquoted as bash would (``g"it" st'atus'`` is ``git status``). What bash only learns
at run time (``$CMD``, a glob or brace in a program name, ``bash -c "$X"``) is not guessed: the
command is marked *opaque*, and a policy never lets a command rule allow it. Wrappers that run
another command (``sudo``, ``env``, ``xargs``, ``find -exec``, ``nice`` ...) and shells given a
string (``sh -c``, ``eval``, ``su -c``) are looked through, so the command they run is judged too.

Redirections are collected with how they use their target: ``>``, ``>>``, ``&>``, ``>|`` write,
``<`` reads, ``<>`` does both. File descriptor duplications (``2>&1``) and harmless devices
(``/dev/null``) are not paths. Every other target is reported, ``/tmp`` included: whether a
folder is the run's own is a fact of how the command runs, which the request tells the policy
(``private_paths``), not of the line.

The grammar itself, and the guards around it, are in `stockade.policies.bash_grammar`; how a
word is unquoted is in `stockade.policies.words`.
"""

from __future__ import annotations

import posixpath
import re
from dataclasses import dataclass, field

from tree_sitter import Node

from stockade.policies.bash_grammar import ascii_stand_in, parser, too_complex
from stockade.policies.command_forms import normal_forms
from stockade.policies.request import Access
from stockade.policies.words import (
    Word,
    ansi_c,
    has_glob,
    join_words,
    unescape_string,
    unescape_word,
)
from stockade.policies.wrappers import unwrap

WORKSPACE = "/workspace"
MAX_DEPTH = 8  # nested `bash -c` strings and wrappers followed; deeper is opaque
MAX_CWDS = 8  # directories a line may `cd` into that relative paths are judged against

# devices any command may use without touching a file
HARMLESS_DEVICES = frozenset(
    {"/dev/null", "/dev/zero", "/dev/stdin", "/dev/stdout", "/dev/stderr", "/dev/tty"}
    | {"/dev/random", "/dev/urandom", "/dev/full"}
)
_FD_PATH = re.compile(r"^/dev/fd/\d+$")
_ASSIGNMENT = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*=")

_WRITE_OPERATORS = frozenset({">", ">>", ">|", "&>", "&>>"})
_READ_OPERATORS = frozenset({"<"})
_BOTH_OPERATORS = frozenset({"<>"})


@dataclass(frozen=True, slots=True)
class SimpleCommand:
    """One command that will run: its leading assignments and its words (program first).

    ``opaque`` is set when what runs cannot be known before it runs (a program that is an
    expansion, a wrapper whose payload is). ``via`` names the wrapper or shell string it was
    found inside, outermost first (empty for a command written directly)."""

    assignments: tuple[str, ...]
    words: tuple[Word, ...]
    opaque: bool = False
    via: tuple[str, ...] = ()

    @property
    def program(self) -> str:
        """The program as written (empty for a bare assignment)."""
        return self.words[0].text if self.words else ""

    @property
    def name(self) -> str:
        """The program's base name: ``/usr/bin/rm`` and ``./rm`` are ``rm``."""
        return posixpath.basename(self.program) or self.program

    @property
    def args(self) -> tuple[str, ...]:
        """The arguments' texts (dynamic ones as written)."""
        return tuple(w.text for w in self.words[1:])

    def spellings(self) -> list[str]:
        """The ways rules see this command: as written (assignments and program path
        included), then bare (assignments dropped, the program by its base name), then its
        normal forms (`normal_forms`: ``git -C . push`` is also ``git push``, ``npm i x``
        also ``npm install x``), each once."""
        found = self.plain_spellings()
        for form in normal_forms(self.name, self.args) if found else ():
            if form not in found:
                found.append(form)
        return found

    def plain_spellings(self) -> list[str]:
        """As written, then bare (when that differs): the spellings that take the policy's
        default when no rule names them."""
        if self.opaque or not self.words:
            return []
        written = " ".join([*self.assignments, *(w.text for w in self.words)])
        bare = " ".join([self.name, *self.args])
        return [written] if bare == written else [written, bare]


@dataclass(frozen=True, slots=True)
class Redirect:
    """A file a redirection opens, and how: ``read`` or ``write``. ``path`` is absolute
    (relative targets joined to each directory the line may be in); None when the target is
    only known at run time."""

    operator: str
    target: str
    access: Access
    paths: tuple[str, ...]


@dataclass(frozen=True, slots=True)
class CommandLine:
    """A parsed command line: every simple command in it, the pipelines among them (for
    patterns like ``curl ... | sh``), and the files its redirections open.

    ``problems`` says what could not be read statically (a syntax error, a dynamic program,
    a dynamic redirection target); when there is any, the line is partly opaque."""

    text: str
    commands: tuple[SimpleCommand, ...]
    pipelines: tuple[tuple[SimpleCommand, ...], ...]
    redirects: tuple[Redirect, ...]
    problems: tuple[str, ...]

    @property
    def opaque(self) -> bool:
        """Whether any part of the line can only be known when it runs."""
        return bool(self.problems)

    def spellings(self) -> list[str]:
        """Every spelling of every readable command, in order, without duplicates."""
        found: dict[str, None] = {}
        for command in self.commands:
            for spelling in command.spellings():
                found.setdefault(spelling, None)
        return list(found)

    def extra_spellings(self) -> frozenset[str]:
        """The spellings only a normal form gives (not any command as written or bare): a rule
        that names one speaks about the command, but one no rule names says nothing of it (it
        does not take the policy's default, or ``allow npm ci`` under ``default = "deny"``
        would be denied by its ``npm install`` form)."""
        plain = {s for command in self.commands for s in command.plain_spellings()}
        return frozenset(s for s in self.spellings() if s not in plain)

    def paths(self) -> list[tuple[str, Access]]:
        """The files the redirections open, each with its access, without duplicates."""
        found: dict[tuple[str, Access], None] = {}
        for redirect in self.redirects:
            for path in redirect.paths:
                found.setdefault((path, redirect.access), None)
        return list(found)


def parse_command(text: str, *, cwd: str = WORKSPACE) -> CommandLine:
    """Parse ``text`` as bash. Never raises: what cannot be read is named in ``problems``."""
    reader = _Reader(cwd)
    reader.read_line(text, depth=0, via=())
    return CommandLine(
        text,
        tuple(reader.commands),
        tuple(tuple(p) for p in reader.pipelines if len(p) > 1),
        tuple(reader.redirects),
        tuple(dict.fromkeys(reader.problems)),
    )


@dataclass
class _Reader:
    """Walks parse trees, collecting commands, pipelines and redirections."""

    cwd: str
    commands: list[SimpleCommand] = field(default_factory=list)
    pipelines: list[list[SimpleCommand]] = field(default_factory=list)
    redirects: list[Redirect] = field(default_factory=list)
    problems: list[str] = field(default_factory=list)
    cwds: list[str] = field(default_factory=list)
    sources: list[bytes] = field(default_factory=list)  # the lines being walked, innermost last
    cwd_known: bool = True

    def __post_init__(self) -> None:
        self.cwds = [self.cwd]

    # -- lines -------------------------------------------------------------------------------

    def read_line(self, text: str, *, depth: int, via: tuple[str, ...]) -> None:
        if depth > MAX_DEPTH:
            self.problems.append(f"commands nested more than {MAX_DEPTH} deep")
            self.commands.append(SimpleCommand((), (), opaque=True, via=via))
            return
        if "\x00" in text:
            self.problems.append("the command line contains a NUL byte")
            return
        source = text.encode("utf-8", "surrogatepass")
        parsed = ascii_stand_in(text, source)
        refused = too_complex(text, parsed)
        if refused is not None:
            self.problems.append(refused)
            self.commands.append(SimpleCommand((), (), opaque=True, via=via))
            return
        tree = parser().parse(parsed)
        root = tree.root_node
        self.sources.append(source)  # node texts come from here, by byte offsets
        try:
            if root.has_error:
                self.problems.append(f"not valid shell syntax near {self.error_at(root)!r}")
            self.walk(root, depth=depth, via=via)
        finally:
            self.sources.pop()

    def text(self, node: Node) -> str:
        """The original text of ``node`` (of the line being walked)."""
        raw = self.sources[-1][node.start_byte : node.end_byte]
        try:
            return raw.decode("utf-8", "surrogatepass")
        except UnicodeDecodeError:  # a node ending inside a stand-in (an operator `%`)
            return raw.decode("utf-8", "replace")

    def error_at(self, root: Node) -> str:
        """A few characters from where the first syntax error is."""
        stack = [root]
        while stack:
            node = stack.pop()
            if node.type == "ERROR" or node.is_missing:
                start = node.start_byte
                return self.sources[-1][start : start + 20].decode("utf-8", "replace")
            stack.extend(reversed(node.children))
        return self.sources[-1][:20].decode("utf-8", "replace")

    def walk(self, node: Node, *, depth: int, via: tuple[str, ...]) -> None:
        kind = node.type
        if kind == "command":
            self.command(node, depth=depth, via=via)
            return
        if kind == "pipeline":
            # every command of the pipeline, wrapped and nested ones included: enough to see
            # a downloader feeding an interpreter
            start = len(self.commands)
            for child in node.children:
                self.walk(child, depth=depth, via=via)
            self.pipelines.append(self.commands[start:])
            return
        if kind in ("file_redirect", "heredoc_redirect", "herestring_redirect"):
            self.redirect(node, depth=depth, via=via)
            return
        if kind == "variable_assignment" or kind == "declaration_command":
            # `X=$(cmd)` and `export X=$(cmd)` run cmd: walk the values
            for child in node.named_children:
                self.walk(child, depth=depth, via=via)
            return
        for child in node.children:
            self.walk(child, depth=depth, via=via)

    # -- commands ----------------------------------------------------------------------------

    def command(self, node: Node, *, depth: int, via: tuple[str, ...]) -> None:
        assignments: list[str] = []
        groups: list[list[Node]] = []  # the nodes of each word
        for child in node.named_children:
            if child.type == "variable_assignment":
                assignments.append(self.word_of(child, depth=depth, via=via).text)
            elif child.type in ("file_redirect", "heredoc_redirect", "herestring_redirect"):
                self.redirect(child, depth=depth, via=via)
            elif child.type != "comment":
                # the grammar splits some words in two ('r'\m); pieces that touch are one word
                if groups and groups[-1][-1].end_byte == child.start_byte:
                    groups[-1].append(child)
                else:
                    groups.append([child])
        for number, segment in enumerate(self.split_at_newlines(groups)):
            words = [
                join_words([self.word_of(piece, depth=depth, via=via) for piece in group])
                for group in segment
            ]
            self.simple(assignments if number == 0 else [], words, depth=depth, via=via)

    def split_at_newlines(self, groups: list[list[Node]]) -> list[list[list[Node]]]:
        """The words of a command node, split where an unescaped newline lies between two of
        them. bash ends a command at a newline; the grammar sometimes does not (after a
        pipeline inside a list, ``a | b | c`` then a newline then ``rm -rf /`` came out as one
        command ``c rm -rf /``), which would hide the second command from every rule."""
        source = self.sources[-1]
        segments: list[list[list[Node]]] = [[]]
        for group in groups:
            if segments[-1]:
                gap = source[segments[-1][-1][-1].end_byte : group[0].start_byte]
                if b"\n" in gap.replace(b"\\\n", b""):
                    segments.append([])
            segments[-1].append(group)
        return segments

    def simple(
        self, assignments: list[str], words: list[Word], *, depth: int, via: tuple[str, ...]
    ) -> None:
        """Record one simple command, and judge what it runs if it is a wrapper."""
        if not words:
            return  # a bare assignment runs nothing (substitutions in it were walked)
        program = words[0]
        if program.dynamic or program.pattern:
            what = "an expansion" if program.dynamic else "a pattern the shell expands"
            self.problems.append(f"the program {program.text!r} is {what}")
            self.commands.append(SimpleCommand(tuple(assignments), tuple(words), True, via))
            return
        command = SimpleCommand(tuple(assignments), tuple(words), False, via)
        self.commands.append(command)
        self.track_cd(command)
        self.unwrap(command, depth=depth, via=via)

    def track_cd(self, command: SimpleCommand) -> None:
        """Relative paths after a ``cd`` are judged against every folder the line may be
        in (a sound over-approximation: subshells and failed cd's only shrink the truth)."""
        if command.name not in ("cd", "pushd", "popd"):
            return
        targets = [w for w in command.words[1:] if not w.text.startswith("-")]
        if command.name == "popd" or not targets or targets[0].dynamic:
            self.cwd_known = False
            return
        target = targets[0].text
        if target.startswith("~"):
            self.cwd_known = False
            return
        joined = [posixpath.normpath(posixpath.join(c, target)) for c in self.cwds]
        self.cwds = list(dict.fromkeys([*self.cwds, *joined]))
        if len(self.cwds) > MAX_CWDS:
            self.cwd_known = False

    def unwrap(self, command: SimpleCommand, *, depth: int, via: tuple[str, ...]) -> None:
        """Judge what a wrapper runs, and parse the strings shells are given to run."""
        found = unwrap(command.name, command.words[1:])
        if found is None:
            return
        inner_via = (*via, command.name)
        if found.opaque or depth + 1 > MAX_DEPTH:
            why = found.opaque or f"commands nested more than {MAX_DEPTH} deep"
            self.problems.append(f"{command.name}: {why}")
            self.commands.append(SimpleCommand((), (), True, inner_via))
            return
        for script in found.scripts:
            self.read_line(script, depth=depth + 1, via=inner_via)
        for words in found.runs:
            inner = SimpleCommand(found.assignments, words, False, inner_via)
            if words[0].dynamic or words[0].pattern:
                self.problems.append(f"{command.name} runs {inner.program!r}, known only then")
                self.commands.append(SimpleCommand((), (), True, inner_via))
                continue
            self.commands.append(inner)
            self.unwrap(inner, depth=depth + 1, via=inner_via)

    # -- redirections ------------------------------------------------------------------------

    def redirect(self, node: Node, *, depth: int, via: tuple[str, ...]) -> None:
        if node.type != "file_redirect":
            # heredocs and here-strings feed text; substitutions inside them still run
            for child in node.named_children:
                self.walk(child, depth=depth, via=via)
            return
        operator = ""
        target: Node | None = None
        for child in node.children:
            if child.type == "ERROR":
                operator += self.text(child)  # `<>` is not in the grammar: `<`, then an error `>`
            elif not child.is_named and target is None:
                operator += child.type
            elif child.is_named and child.type != "file_descriptor" and target is None:
                target = child  # the first word; the grammar may glue the next one's fd after it
        if target is None:
            return
        # substitutions inside the target run too
        self.walk(target, depth=depth, via=via)
        word = self.word_of(target, depth=depth, via=via)
        if operator in (">&", "<&"):
            if word.text.isdigit() or word.text == "-" or operator == "<&":
                return  # a descriptor duplicated or closed, not a file
            operator = "&>"  # `>& file` is `&> file`
        accesses: list[Access]
        if operator in _WRITE_OPERATORS:
            accesses = ["write"]
        elif operator in _READ_OPERATORS:
            accesses = ["read"]
        elif operator in _BOTH_OPERATORS:
            accesses = ["read", "write"]
        else:
            return
        if word.dynamic or word.pattern or word.text.startswith("~"):
            self.problems.append(f"the redirection target {word.text!r} is known only at run time")
            for access in accesses:
                self.redirects.append(Redirect(operator, word.text, access, ()))
            return
        paths = self.resolve(word.text)
        for access in accesses:
            self.redirects.append(Redirect(operator, word.text, access, paths))

    def resolve(self, target: str) -> tuple[str, ...]:
        if target in HARMLESS_DEVICES or _FD_PATH.match(target):
            return ()
        if target.startswith("/"):
            paths = [_join("/", target)]
        elif not self.cwd_known:
            self.problems.append(f"the relative path {target!r} follows a cd known only then")
            return ()
        else:
            paths = [_join(c, target) for c in self.cwds]
        return tuple(dict.fromkeys(paths))

    # -- words -------------------------------------------------------------------------------

    def word_of(self, node: Node, *, depth: int, via: tuple[str, ...]) -> Word:
        """The static text of a word node; substitutions inside are walked (they run)."""
        kind = node.type
        text = self.text(node)
        if kind in ("command_name", "variable_assignment"):
            parts = [self.word_of(c, depth=depth, via=via) for c in node.children]
            if kind == "variable_assignment":
                return join_words(parts)
            return join_words(parts) if parts else Word(text)
        if kind == "word":
            return Word(unescape_word(text), pattern=has_glob(text))
        if kind in ("number", "variable_name", "=", "file_descriptor"):
            return Word(text)
        if kind == "raw_string":
            return Word(text[1:-1])
        if kind == "ansi_c_string":
            return Word(ansi_c(text[2:-1]))
        if kind in ("string", "translated_string"):
            parts = []
            for child in node.named_children:
                if child.type == "string_content":
                    parts.append(Word(unescape_string(self.text(child))))
                else:
                    parts.append(self.word_of(child, depth=depth, via=via))
            if not parts:
                return Word("")
            joined = join_words(parts)
            return Word(joined.text, joined.dynamic, False)
        if kind == "concatenation":
            return join_words([self.word_of(c, depth=depth, via=via) for c in node.children])
        if kind in ("command_substitution", "process_substitution", "arithmetic_expansion"):
            self.walk(node, depth=depth, via=via)
            return Word(text, dynamic=True)
        if kind in ("simple_expansion", "expansion"):
            for child in node.named_children:  # ${X:-$(cmd)} runs cmd
                self.walk(child, depth=depth, via=via)
            return Word(text, dynamic=True)
        if kind in ("array", "brace_expression"):
            return Word(text, pattern=True)
        # anything else (a regex in [[ ]], an unusual node): known only at run time
        self.walk(node, depth=depth, via=via)
        return Word(text, dynamic=True)


def _join(cwd: str, target: str) -> str:
    return posixpath.normpath(posixpath.join(cwd, target))
