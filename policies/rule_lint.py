"""Lint findings on what a rule can decide: rules a stronger or earlier one always beats, and
rules that try to allow what Stockade's own checks decide first.

A rule never decides when every atom it matches is matched by a rule ranked before it (a
stronger effect, or the same one earlier): both are named, with the winner's line and effect.
An allow (or warn) rule over a protected path cannot allow it, since the dangerous-path rule
comes first and is stronger; one over a dangerous command cannot either, since that check only
ever makes a decision stricter. Both findings say what to remove from the list to allow it.
"""

from __future__ import annotations

from itertools import product

from stockade.policies.dangerous import CHANGE_ONLY, DEFAULT_DANGEROUS, GIT_ALIAS, GIT_ENTRIES
from stockade.policies.dangerous import entry_patterns as dangerous_entry_patterns
from stockade.policies.dangerous_commands import BUILT_IN_IDS, dangerous_commands
from stockade.policies.decision import Effect
from stockade.policies.globs import PathSpec, expand, path_spec
from stockade.policies.lint_report import Report
from stockade.policies.paths import fold
from stockade.policies.policy import Policy
from stockade.policies.policy_file import DangerousSpec
from stockade.policies.rule_coverage import actions_of, covers, prefix_words
from stockade.policies.rules import Rule
from stockade.policies.ruleset import DANGEROUS_RULE, READ_ONLY_RULE, STATE_RULE
from stockade.policies.shell import parse_command

_SYSTEM = (READ_ONLY_RULE, DANGEROUS_RULE, STATE_RULE)
_TRIES = {Effect.ALLOW: "tries to allow", Effect.WARN: "tries to allow (with a warning)"}


def is_user(rule: Rule) -> bool:
    """Whether ``rule`` is one of the file's, not Stockade's own."""
    return rule.id not in _SYSTEM


def shadow_findings(policy: Policy, report: Report, protected: set[str]) -> set[str]:
    """Add a finding for each of the file's rules that never decides because a rule ranked
    before it matches every atom it matches; returns their ids. A rule beaten by the
    dangerous-path check whose id is in ``protected`` (`protected_findings` reported it, with
    what to do) is left to that finding, a rule the read_only switch beats to lint's own note."""
    shadowed: set[str] = set()
    positions = {rule.id: index for index, rule in enumerate(policy.spec.rules)}
    ranked = sorted(policy.rules, key=lambda r: r.rank)
    for rule in policy.rules:
        if not is_user(rule):
            continue
        for earlier in ranked:
            if earlier is rule:
                break
            if earlier.id == READ_ONLY_RULE and rule.effect is not Effect.DENY:
                continue  # lint says so in its own words
            if not covers(earlier, rule):
                continue
            if earlier.id == DANGEROUS_RULE and rule.id in protected:
                break
            shadowed.add(rule.id)
            why = "is stronger" if earlier.severity > rule.severity else "comes first"
            quiet = earlier.id == DANGEROUS_RULE and earlier.effect is rule.effect
            report.add(
                "info" if quiet else "warning",
                ("rules", positions[rule.id]),
                f"rule {rule.id!r} never decides: {_label(earlier, policy, report)} matches "
                f"everything it matches and {why}",
            )
            break
    return shadowed


def _label(rule: Rule, policy: Policy, report: Report) -> str:
    location: tuple[str | int, ...]
    if rule.id == READ_ONLY_RULE:
        name, location = "the read_only switch", ("read_only",)
    elif rule.id == DANGEROUS_RULE:
        name, location = "the dangerous-path check", ("dangerous_paths", "effect")
    else:
        index = next(i for i, r in enumerate(policy.spec.rules) if r.id == rule.id)
        name, location = f"rule {rule.id!r}", ("rules", index)
    line = report.lines.line(location)  # None for a table the file leaves out
    where = f", line {line}" if line else ""
    return f"{name} ({rule.effect.value}{where})"


def protected_findings(policy: Policy, report: Report) -> set[str]:
    """Add a finding for each allow or warn pattern that names a protected path or a
    dangerous command, which the rule cannot allow; returns the ids of those rules."""
    found: set[str] = set()
    spec = policy.spec
    path_effect = Effect(spec.dangerous_paths.effect)
    command_effect = Effect(spec.dangerous_commands.effect)
    entries = protected_entries(spec.dangerous_paths)
    commands = dangerous_commands(
        remove=spec.dangerous_commands.remove, extend=spec.dangerous_commands.extend
    )
    for index, rule_spec in enumerate(spec.rules):
        rule = next(r for r in policy.rules if r.id == rule_spec.id and is_user(r))
        actions = actions_of(rule)
        if rule.effect not in _TRIES or actions == frozenset():
            continue  # a rule that matches nothing has a finding of its own
        tries = f"rule {rule.id!r} {_TRIES[rule.effect]}"
        if rule.paths is not None and path_effect.severity > rule.effect.severity:
            actions = actions or frozenset()
            for number, pattern in enumerate(rule.path_patterns):
                hit = _protected_sample(pattern, rule.paths, actions, entries)
                if hit is None:
                    continue
                path, entry, origin = hit
                found.add(rule.id)
                report.add(
                    "warning",
                    ("rules", index, "paths", number),
                    f"{tries} {path}, a protected path: the dangerous-path check (effect "
                    f"{path_effect.value}) decides first, so this rule cannot allow it; to "
                    "allow it, " + _path_advice(entry, origin, spec.dangerous_paths),
                )
        if rule.commands is not None and command_effect.severity > rule.effect.severity:
            for number, pattern in enumerate(rule.command_patterns):
                for sample in command_samples(pattern):
                    danger = commands.find(parse_command(sample))
                    if danger is None:
                        continue
                    found.add(rule.id)
                    report.add(
                        "warning",
                        ("rules", index, "commands", number),
                        f"{tries} {sample!r}, a dangerous command (id {danger.id}): the "
                        f"dangerous-command check (effect {command_effect.value}) is stricter, "
                        "so this rule cannot allow it; "
                        + _command_advice(danger.id, spec.dangerous_commands.remove),
                    )
                    break
    return found


Entry = tuple[str, str, PathSpec, frozenset[str] | None]
"""a protected-path entry: as listed, where it comes from (built-in, replace or extend), its
patterns compiled as the dangerous-path rule matches them, the actions it is protected for"""


def protected_entries(spec: DangerousSpec) -> list[Entry]:
    """The policy's protected-path list, entry by entry (as `dangerous_patterns` builds it)."""
    origin = "built-in" if spec.replace is None else "replace"
    base = list(DEFAULT_DANGEROUS if spec.replace is None else spec.replace)
    removed = set(spec.remove)
    if GIT_ALIAS in removed and GIT_ALIAS not in base:
        removed = (removed - {GIT_ALIAS}) | (set(GIT_ENTRIES) & set(base))
    listed = [(e, origin) for e in base if e not in removed]
    listed += [(e, "extend") for e in spec.extend if e not in base]
    entries: list[Entry] = []
    for entry, source in listed:
        patterns = dangerous_entry_patterns(entry)
        changes = all(p in CHANGE_ONLY for p in patterns)
        actions = frozenset({"write", "delete"}) if changes else None
        entries.append((entry, source, path_spec(patterns, folded=True), actions))
    return entries


def _protected_sample(
    pattern: str, paths: PathSpec, actions: frozenset[str], entries: list[Entry]
) -> tuple[str, str, str] | None:
    """A path ``pattern`` names that the rule matches and a protected entry covers (for the
    rule's actions): the path, the entry and its origin."""
    if pattern.startswith("!"):
        return None
    for sample in path_samples(pattern):
        folded = fold(sample)
        if not paths.match(sample, folded):
            continue
        for entry, origin, protected, protected_actions in entries:
            if protected_actions is not None and not protected_actions & actions:
                continue  # protected against changes only, and the rule only reads
            if protected.match(sample, folded):
                return sample, entry, origin
    return None


def path_samples(pattern: str) -> list[str]:
    """Paths ``pattern`` matches, for testing it against the protected list: its own path
    (a wildcard read as 'x', or as nothing), and for ``dir/**`` the folder and a path in it."""
    samples: list[str] = []
    for form in expand(pattern):
        segments = form.split("/")
        tree = segments[-1] == "**"
        if tree:
            segments = segments[:-1]
        if segments[:1] == ["**"]:  # anywhere: shown in the workspace
            segments = ["", "workspace", *segments[1:]]
        for star in ("x", ""):
            literal = [_sample_segment(s, star) for s in segments if s != "**"]
            if any(s is None for s in literal):
                break
            path = "/" + "/".join(s for s in literal if s)
            for sample in (path, f"{path.rstrip('/')}/x") if tree else (path,):
                if sample not in samples:
                    samples.append(sample)
    return samples


def _sample_segment(segment: str, star: str) -> str | None:
    """A name ``segment`` matches, with each ``*`` as ``star`` and ``?`` as 'x'; None when it
    holds a class (no sample is sure to match it)."""
    out: list[str] = []
    index = 0
    while index < len(segment):
        char = segment[index]
        if char == "\\" and index + 1 < len(segment):
            out.append(segment[index + 1])
            index += 2
            continue
        if char == "[":
            return None
        out.append(star if char == "*" else "x" if char == "?" else char)
        index += 1
    return "".join(out)


def command_samples(pattern: str) -> list[str]:
    """Commands ``pattern`` matches, for testing against the dangerous-command list: the
    prefix form's words alone, and the pattern with each wildcard read as 'x' and as '/'."""
    samples: list[str] = []
    words = prefix_words(pattern)
    bodies = [words] if words is not None else []
    bodies.append(pattern)
    for body, fill in product(bodies, ("x", "/")):
        if "[" in body:
            continue
        sample = body.replace("*", fill).replace("?", fill).strip()
        if sample and sample not in samples:
            samples.append(sample)
    return samples


def _path_advice(entry: str, origin: str, spec: DangerousSpec) -> str:
    if origin == "built-in":
        remove = [*spec.remove, entry]
        return f"remove {entry!r} from protected paths: [dangerous_paths] remove = {remove!r}"
    return f"take {entry!r} out of [dangerous_paths] {origin}"


def _command_advice(found: str, removed: list[str]) -> str:
    if found in BUILT_IN_IDS:
        return f"[dangerous_commands] remove = {[*removed, found]!r} to allow it"
    return f"take the pattern {found!r} out of [dangerous_commands] extend to allow it"
