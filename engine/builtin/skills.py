"""Skills: folders of instructions (``SKILL.md``) an agent reads before acting.

A skill is not callable. The toolkit lists the skills (name and description from the file's
YAML front matter) in the agent's prompt and offers one read-only tool, ``view_skill``, that
returns a skill's full text by name. The agent never names a file path, only a skill.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ConfigDict, Field

from stockade.engine.errors import SkillError
from stockade.engine.injection import ToolContext
from stockade.engine.tools import ToolBase

SKILL_FILE = "SKILL.md"
MAX_SKILL_BYTES = 1_000_000


@dataclass(frozen=True, slots=True)
class Skill:
    """One skill: its name, what it is for, and where its ``SKILL.md`` lives."""

    name: str
    description: str
    path: Path


def _front_matter(path: Path) -> dict[str, Any]:
    text = path.read_text(encoding="utf-8")
    if not text.startswith("---"):
        raise SkillError(
            f"{path}: no front matter; start the file with '---', name and description"
        )
    _, _, rest = text.partition("\n")
    block, sep, _ = rest.partition("\n---")
    if not sep:
        raise SkillError(f"{path}: the front matter is not closed by a '---' line")
    import yaml  # 17 ms to import, for programs that load skills only

    try:
        data = yaml.safe_load(block)
    except yaml.YAMLError as exc:
        raise SkillError(f"{path}: the front matter is not valid YAML ({exc})") from None
    if not isinstance(data, dict):
        raise SkillError(f"{path}: the front matter must be a mapping with name and description")
    return data


def read_skill(path: Path) -> Skill:
    """Parse one ``SKILL.md``; raises SkillError naming the file and what is missing."""
    data = _front_matter(path)
    name, description = data.get("name"), data.get("description")
    if not isinstance(name, str) or not name.strip():
        raise SkillError(f"{path}: the front matter needs a non-empty 'name'")
    if not isinstance(description, str) or not description.strip():
        raise SkillError(f"{path}: the front matter needs a non-empty 'description'")
    return Skill(name.strip(), " ".join(description.split()), path)


def load_skills(root: Path) -> list[Skill]:
    """Skills in ``root`` (itself a skill folder, or a folder of skill folders)."""
    if not root.is_dir():
        raise SkillError(f"skill folder {root} does not exist or is not a directory")
    if (root / SKILL_FILE).is_file():
        return [read_skill(root / SKILL_FILE)]
    found = [
        read_skill(d / SKILL_FILE) for d in sorted(root.iterdir()) if (d / SKILL_FILE).is_file()
    ]
    if not found:
        raise SkillError(f"no {SKILL_FILE} found in {root} or its sub-folders")
    return found


def skills_prompt(skills: Sequence[Skill]) -> str:
    """The prompt fragment that lists skills and says how to read one."""
    if not skills:
        return ""
    lines = [
        "## Skills",
        f"Skills are instructions for particular tasks. Before using one, read it with the "
        f"{SkillViewer.name} tool, then follow it with your other tools.",
    ]
    lines += [f"- {s.name}: {s.description}" for s in skills]
    return "\n".join(lines)


class _ViewSkillArgs(BaseModel):
    model_config = ConfigDict(extra="forbid")
    name: str = Field(description="The name of the skill to read.")


class SkillViewer(ToolBase):
    """Returns the full instructions of a skill by name."""

    name = "view_skill"
    description = "Read the full instructions of a skill by its name."
    args_model = _ViewSkillArgs
    read_only = True

    def __init__(self, skills: Mapping[str, Skill]) -> None:
        self._skills = skills  # the toolkit's live mapping: skills added later are visible

    def run(self, args: dict[str, Any], ctx: ToolContext) -> str:
        skill = self._skills.get(args["name"])
        if skill is None:
            known = ", ".join(sorted(self._skills)) or "(none)"
            raise LookupError(f"no skill named {args['name']!r}; skills: {known}")
        if skill.path.stat().st_size > MAX_SKILL_BYTES:
            raise ValueError(f"skill {skill.name!r} is larger than {MAX_SKILL_BYTES} bytes")
        return skill.path.read_text(encoding="utf-8")
