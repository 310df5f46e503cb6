"""What a Bash line changes in the shell for the commands that follow it, for Claude Code's hook.

The hook judges a command by its words and the files they name, read as bash would read them
in a fresh shell. A line can change that shell first: ``PATH=.; ls`` runs ``./ls``,
``export GIT_CONFIG_GLOBAL=x; git status`` makes git read (and run) another config,
``GLOBIGNORE=x; cat *`` lets ``*`` match ``.env``, ``shopt -s dotglob`` the same. A command's
own prefix (``PATH=. ls``) is part of its words, which the policy's command rules see; every
other way of setting a variable or a shell option is listed here, and the hook never lets a
policy allow such a line without a person's yes.

    shell_changes(parse_command("export PATH=.; ls"))   # ['export PATH=.']

Written by hand over the tree-sitter bash grammar Stockade's command parser uses: the parser
keeps commands, and these are not commands (an assignment, ``export``, a ``for`` variable,
``$((i = 1))``, ``${X:=y}``) or are builtins whose effect is on the shell (``read``,
``shopt``, ``alias``, ``trap`` ...). Shell lines run by a wrapper (``bash -c '...'``) are read
too.
"""

from __future__ import annotations

from tree_sitter import Node

from stockade.policies import CommandLine
from stockade.policies.bash_grammar import ascii_stand_in, parser
from stockade.policies.wrappers import unwrap

MAX_SHOWN = 5  # changes named in a reason

# builtins that set variables, shell options, aliases, hashed programs or traps
_STATEFUL = frozenset(
    {"read", "mapfile", "readarray", "getopts", "let", "shopt", "enable", "hash", "alias"}
    | {"trap", "declare", "typeset", "export", "local", "readonly"}
)
_ARITHMETIC = frozenset({"arithmetic_expansion", "c_style_for_statement"})
_ARITHMETIC_SETS = frozenset(
    {"=", "+=", "-=", "*=", "/=", "%=", "<<=", ">>=", "&=", "^=", "|=", "++", "--"}
)


def shell_changes(line: CommandLine) -> list[str]:
    """How ``line`` changes the shell for what follows, each as written (a few), or [] when
    it does not. A line that could not be read at all is the caller's to refuse."""
    found: list[str] = []
    texts = [line.text]
    for command in line.commands:
        if command.opaque or not command.words:
            continue
        if command.name in _STATEFUL or (
            command.name == "printf" and any(w.text.startswith("-v") for w in command.words[1:])
        ):
            found.append(" ".join(w.text for w in command.words)[:80])
        wrapped = unwrap(command.name, command.words[1:])
        if wrapped is not None:
            texts.extend(wrapped.scripts)
    for text in texts:
        if len(found) >= MAX_SHOWN:
            break
        _walk_line(text, found)
    return list(dict.fromkeys(found))[:MAX_SHOWN]


def _walk_line(text: str, found: list[str]) -> None:
    if "\x00" in text:
        return  # never parsed: the command parser has said so, and the line is refused
    source = text.encode("utf-8", "surrogatepass")
    tree = parser().parse(ascii_stand_in(text, source))
    stack: list[tuple[Node, bool]] = [(tree.root_node, False)]
    while stack and len(found) < MAX_SHOWN:
        node, arithmetic = stack.pop()
        if _sets(node, arithmetic):
            found.append(_shown(node, source))
        inside = arithmetic or node.type in _ARITHMETIC or _double_parens(node)
        stack.extend((child, inside) for child in reversed(node.children))


def _sets(node: Node, arithmetic: bool) -> bool:
    """Whether ``node`` sets a variable or option, other than in a command's own prefix."""
    kind = node.type
    if kind == "variable_assignment":
        parent = node.parent
        return parent is None or parent.type not in ("command", "declaration_command")
    if kind in ("declaration_command", "for_statement"):  # export X=1; for X in ...; select
        return True
    if kind == "expansion":
        return any(child.type in (":=", "=") for child in node.children)  # ${X:=value}
    if arithmetic and kind in ("binary_expression", "postfix_expression", "unary_expression"):
        return any(not c.is_named and c.type in _ARITHMETIC_SETS for c in node.children)
    return False


def _shown(node: Node, source: bytes) -> str:
    def text(part: Node) -> str:
        return source[part.start_byte : part.end_byte].decode("utf-8", "replace")

    if node.type == "for_statement":  # the loop's head, not its body
        head = [text(c) for c in node.children[:2]]
        return " ".join(head)
    return text(node)[:80]


def _double_parens(node: Node) -> bool:
    """``(( ... ))``: an arithmetic command (the grammar calls it a compound statement)."""
    first = node.children[0] if node.children else None
    return node.type == "compound_statement" and first is not None and first.type == "(("


__all__ = ["MAX_SHOWN", "shell_changes"]
