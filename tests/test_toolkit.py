"""The toolkit: registering tools, groups, the reset_tools meta tool, presets, context injection,
postprocess hooks, the finish function, state, skills and the per-agent registry.

Everything runs through real `Toolkit` and `Engine` objects; calls go through ``engine.call``.
"""

from __future__ import annotations

import contextlib
import functools
import json
from pathlib import Path
from typing import Any

import pytest
from pydantic import BaseModel, Field

from stockade.engine import (
    ArgumentError,
    ContextMissingError,
    DuplicateToolError,
    Emitter,
    Engine,
    GroupError,
    OutputError,
    RegisteredTool,
    SkillError,
    StockadeError,
    ToolBase,
    ToolCall,
    ToolContext,
    ToolDefinitionError,
    Toolkit,
    ToolRegistry,
    ToolResult,
    UnknownToolError,
    tool,
)

# -- tools used throughout -----------------------------------------------------------------------


@tool
def echo(text: str) -> str:
    """Echo the text back."""
    return text


def echo_upper(text: str) -> str:
    """Echo the text back in capitals."""
    return text.upper()


async def async_double(n: int) -> int:
    """Double a number, asynchronously."""
    return n * 2


def power(base: int, exponent: int) -> int:
    """Raise base to exponent."""
    return base**exponent


def fetch(url: str, api_key: str) -> str:
    """Fetch a URL.

    Args:
        url: The address to fetch.
        api_key: The secret key.
    """
    return f"{url} with {api_key}"


def search_web(query: str) -> str:
    """Search the web."""
    return f"results for {query}"


def fetch_page(url: str) -> str:
    """Fetch one web page."""
    return f"page {url}"


def run_sql(sql: str) -> str:
    """Run a SQL query."""
    return f"rows for {sql}"


def reset_tools() -> str:
    """A user tool that happens to share the meta tool's name."""
    return "user reset"


class Counter:
    def __init__(self) -> None:
        self.count = 0

    def increment(self, by: int = 1) -> int:
        """Increase the counter."""
        self.count += by
        return self.count


class Multiplier:
    def __init__(self, factor: int) -> None:
        self.factor = factor

    def __call__(self, n: int) -> int:
        """Multiply n by the factor."""
        return n * self.factor


class ReverseArgs(BaseModel):
    text: str
    secret: str = "none"


class Reverse(ToolBase):
    """Reverse a string."""

    name = "reverse"
    description = "Reverse a string."
    args_model = ReverseArgs

    def run(self, args: dict[str, Any], ctx: ToolContext) -> str:
        return f"{args['text'][::-1]}|{args['secret']}"


class Notebook:
    """An object whose @tool methods become tools."""

    def __init__(self) -> None:
        self.pages: list[str] = []

    @tool
    def write(self, text: str) -> int:
        """Write a page; returns its index."""
        self.pages.append(text)
        return len(self.pages) - 1

    def helper(self) -> str:
        return "not a tool"

    @tool(name="read_page")
    def read(self, index: int, owner: str = "me") -> str:
        """Read a page."""
        return f"{owner}:{self.pages[index]}"

    @tool
    def count(self) -> int:
        """Number of pages."""
        return len(self.pages)


class Plain:
    def method(self) -> str:
        return "x"


# context objects: plain classes no JSON Schema can describe, so they are injected by type


class Database:
    def __init__(self, name: str) -> None:
        self.name = name


class ReplicaDatabase(Database):
    pass


class User:
    def __init__(self, name: str) -> None:
        self.name = name


def db_name(sql: str, db: Database) -> str:
    """Name the database a query would run on."""
    return db.name


def maybe_db(db: Database | None = None) -> str:
    """Name the database, if any."""
    return "no database" if db is None else db.name


def progress(steps: int, emitter: Emitter) -> str:
    """Report progress while working."""
    for i in range(steps):
        emitter.emit(f"step {i}")
    return f"{type(emitter).__name__} active={emitter.active}"


def whoami(ctx: ToolContext) -> str:
    """Say who is calling, and in which call."""
    user = ctx.get(User)
    return f"{ctx.call.id}|{user.name if user else '?'}"


class Answer(BaseModel):
    summary: str
    confidence: float = Field(ge=0, le=1)
    sources: list[str] = []


class Verdict(BaseModel):
    guilty: bool


# -- helpers ---------------------------------------------------------------------------------------


async def call(
    toolkit: Toolkit, name: str, arguments: dict[str, Any] | str | None = None, **kwargs: Any
) -> ToolResult:
    """One call through a fresh engine over ``toolkit``."""
    async with Engine(toolkit) as engine:
        return await engine.call(ToolCall(name=name, arguments=arguments or {}), **kwargs)


def names(toolkit: Toolkit, *, active_only: bool = True) -> list[str]:
    return [t.name for t in toolkit.tools(active_only=active_only)]


def schema_names(toolkit: Toolkit) -> list[str]:
    return [s["function"]["name"] for s in toolkit.schemas()]


def active_groups(toolkit: Toolkit) -> list[str]:
    return [g.name for g in toolkit.groups if g.active]


def grouped_toolkit(**kwargs: Any) -> Toolkit:
    """basic: echo; web (inactive): search_web, fetch_page; db (inactive): run_sql."""
    toolkit = Toolkit(**kwargs)
    toolkit.add(echo)
    toolkit.create_group("web", "Search and fetch web pages", notes="Cite every URL.")
    toolkit.create_group("db", "Query the database", notes="Read-only SQL only.")
    toolkit.add(search_web, group="web")
    toolkit.add(fetch_page, group="web")
    toolkit.add(run_sql, group="db")
    return toolkit


# -- 1. add / add_object / remove ------------------------------------------------------------------


async def test_add_plain_function_is_callable_and_described():
    toolkit = Toolkit()
    registered = toolkit.add(echo)
    assert isinstance(registered, RegisteredTool)
    assert registered.name == "echo"
    assert registered.description == "Echo the text back."
    assert registered.parameters["properties"] == {"text": {"type": "string"}}
    result = await call(toolkit, "echo", {"text": "hi"})
    assert result.status == "ok"
    assert result.text == "hi"


async def test_add_async_function():
    toolkit = Toolkit()
    toolkit.add(async_double)
    result = await call(toolkit, "async_double", {"n": 21})
    assert (result.status, result.text) == ("ok", "42")


async def test_add_bound_method_keeps_its_instance():
    counter = Counter()
    toolkit = Toolkit()
    registered = toolkit.add(counter.increment)
    assert registered.name == "increment"
    assert "self" not in registered.parameters["properties"]
    await call(toolkit, "increment", {"by": 5})
    result = await call(toolkit, "increment", {})
    assert result.text == "6"
    assert counter.count == 6


async def test_add_callable_object_uses_class_name_and_call_docstring():
    toolkit = Toolkit()
    registered = toolkit.add(Multiplier(3))
    assert registered.name == "Multiplier"
    assert registered.description == "Multiply n by the factor."
    assert list(registered.parameters["properties"]) == ["n"]
    result = await call(toolkit, "Multiplier", {"n": 4})
    assert result.text == "12"


async def test_add_partial_hides_bound_arguments():
    toolkit = Toolkit()
    registered = toolkit.add(functools.partial(power, exponent=3), name="cube")
    assert list(registered.parameters["properties"]) == ["base"]
    result = await call(toolkit, "cube", {"base": 2})
    assert result.text == "8"


async def test_add_partial_default_name_is_the_wrapped_function():
    toolkit = Toolkit()
    registered = toolkit.add(functools.partial(power, 2))
    assert registered.name == "power"
    assert list(registered.parameters["properties"]) == ["exponent"]
    result = await call(toolkit, "power", {"exponent": 10})
    assert result.text == "1024"


async def test_add_tool_base_instance():
    toolkit = Toolkit()
    registered = toolkit.add(Reverse())
    assert registered.name == "reverse"
    assert set(registered.parameters["properties"]) == {"text", "secret"}
    result = await call(toolkit, "reverse", {"text": "abc"})
    assert result.text == "cba|none"


def test_add_tool_base_class_instead_of_instance_is_refused():
    toolkit = Toolkit()
    with pytest.raises(ToolDefinitionError, match=r"instance.*Reverse\(\)"):
        toolkit.add(Reverse)  # type: ignore[arg-type]
    assert len(toolkit) == 0


def test_add_with_explicit_name_and_description():
    toolkit = Toolkit()
    registered = toolkit.add(echo, name="say", description="Say something.")
    assert "say" in toolkit
    assert "echo" not in toolkit
    assert registered.description == "Say something."


async def test_add_object_registers_marked_methods_in_definition_order():
    notebook = Notebook()
    toolkit = Toolkit()
    registered = toolkit.add_object(notebook)
    assert [t.name for t in registered] == ["write", "read_page", "count"]
    assert names(toolkit) == ["write", "read_page", "count"]
    assert "helper" not in toolkit
    assert (await call(toolkit, "write", {"text": "hello"})).text == "0"
    assert (await call(toolkit, "read_page", {"index": 0})).text == "me:hello"
    assert notebook.pages == ["hello"]


async def test_add_object_applies_per_tool_presets():
    notebook = Notebook()
    notebook.pages.append("first")
    toolkit = Toolkit()
    toolkit.add_object(notebook, presets={"read_page": {"owner": "alice"}})
    read_page = toolkit.get("read_page")
    assert "owner" not in read_page.parameters["properties"]
    assert list(toolkit.get("write").parameters["properties"]) == ["text"]
    result = await call(toolkit, "read_page", {"index": 0})
    assert result.text == "alice:first"


def test_add_object_without_marked_methods_is_refused():
    toolkit = Toolkit()
    with pytest.raises(ToolDefinitionError, match="Plain has no methods marked with @tool"):
        toolkit.add_object(Plain())
    assert len(toolkit) == 0


def test_add_object_presets_for_unknown_tool_add_nothing():
    toolkit = Toolkit()
    revision = toolkit.revision
    with pytest.raises(ToolDefinitionError, match=r"'erase'.*write, read_page, count"):
        toolkit.add_object(Notebook(), presets={"read_page": {"owner": "a"}, "erase": {"x": 1}})
    assert len(toolkit) == 0
    assert toolkit.revision == revision


def test_add_object_duplicate_adds_nothing():
    toolkit = Toolkit()
    toolkit.add(echo, name="count")
    with pytest.raises(DuplicateToolError):
        toolkit.add_object(Notebook())
    assert names(toolkit) == ["count"]


async def test_remove_unregisters_and_returns_the_tool():
    toolkit = Toolkit()
    registered = toolkit.add(echo)
    toolkit.add(power)
    assert toolkit.remove("echo") is registered
    assert "echo" not in toolkit
    assert schema_names(toolkit) == ["power"]
    result = await call(toolkit, "echo", {"text": "x"})
    assert result.status == "error"
    assert result.error is not None
    assert result.error.type == "UnknownToolError"


def test_remove_unknown_lists_the_tools():
    toolkit = Toolkit()
    toolkit.add(echo)
    toolkit.add(power)
    with pytest.raises(UnknownToolError, match=r"'ech'.*echo, power"):
        toolkit.remove("ech")


def test_remove_toolkit_managed_tools_is_refused(tmp_path: Path):
    toolkit = Toolkit(meta_tool=True)
    toolkit.create_group("web")
    _write_skill(tmp_path / "a", "alpha", "First skill.")
    toolkit.add_skills(tmp_path)
    toolkit.set_finish(Verdict)
    for managed in ("reset_tools", "view_skill", "generate_response"):
        with pytest.raises(ToolDefinitionError, match="managed by the toolkit"):
            toolkit.remove(managed)
        assert managed in toolkit


# -- 2. duplicate names ---------------------------------------------------------------------------


def test_duplicate_name_raises_and_names_the_options():
    toolkit = Toolkit()
    toolkit.add(echo)
    with pytest.raises(DuplicateToolError) as info:
        toolkit.add(echo_upper, name="echo")
    message = str(info.value)
    for option in ("override", "rename", "skip"):
        assert option in message
    assert toolkit.get("echo").source is echo


async def test_on_conflict_override_replaces_the_tool():
    toolkit = Toolkit()
    toolkit.add(echo)
    replacement = toolkit.add(echo_upper, name="echo", on_conflict="override")
    assert toolkit.get("echo") is replacement
    assert len(toolkit) == 1
    result = await call(toolkit, "echo", {"text": "hi"})
    assert result.text == "HI"


async def test_on_conflict_rename_adds_numbered_names():
    toolkit = Toolkit()
    toolkit.add(echo)
    second = toolkit.add(echo_upper, name="echo", on_conflict="rename")
    third = toolkit.add(echo_upper, name="echo", on_conflict="rename")
    assert (second.name, third.name) == ("echo_2", "echo_3")
    assert names(toolkit) == ["echo", "echo_2", "echo_3"]
    assert (await call(toolkit, "echo", {"text": "hi"})).text == "hi"
    assert (await call(toolkit, "echo_2", {"text": "hi"})).text == "HI"
    assert schema_names(toolkit) == ["echo", "echo_2", "echo_3"]


def test_on_conflict_rename_keeps_names_within_64_characters():
    toolkit = Toolkit()
    long_name = "t" * 64
    toolkit.add(echo, name=long_name)
    renamed = toolkit.add(echo, name=long_name, on_conflict="rename")
    assert renamed.name == "t" * 62 + "_2"


async def test_on_conflict_skip_keeps_the_old_tool():
    toolkit = Toolkit()
    original = toolkit.add(echo)
    kept = toolkit.add(echo_upper, name="echo", on_conflict="skip")
    assert kept is original
    assert toolkit.get("echo") is original
    assert (await call(toolkit, "echo", {"text": "hi"})).text == "hi"


async def test_toolkit_default_conflict_strategy():
    toolkit = Toolkit(on_conflict="override")
    toolkit.add(echo)
    toolkit.add(echo_upper, name="echo")
    assert (await call(toolkit, "echo", {"text": "hi"})).text == "HI"
    # a per-call strategy beats the toolkit default
    with pytest.raises(DuplicateToolError):
        toolkit.add(echo, on_conflict="raise")


def test_invalid_conflict_strategy_is_a_value_error():
    with pytest.raises(ValueError, match="on_conflict"):
        Toolkit(on_conflict="merge")  # type: ignore[arg-type]
    toolkit = Toolkit()
    toolkit.add(echo)
    with pytest.raises(ValueError, match="on_conflict"):
        toolkit.add(echo_upper, name="echo", on_conflict="merge")  # type: ignore[arg-type]
    assert toolkit.get("echo").source is echo


@pytest.mark.parametrize("strategy", ["raise", "override", "rename", "skip"])
def test_user_tool_cannot_take_a_toolkit_managed_name(strategy: str):
    toolkit = Toolkit(meta_tool=True)
    toolkit.create_group("web")
    meta = toolkit.get("reset_tools")
    with pytest.raises(DuplicateToolError, match="reset_tools"):
        toolkit.add(reset_tools, on_conflict=strategy)  # type: ignore[arg-type]
    assert toolkit.get("reset_tools") is meta


def test_user_tool_named_like_the_meta_tool_before_any_group_stays_consistent():
    """A user 'reset_tools' added while only basic exists: either refused at once, or the later
    create_group is refused without leaving the group behind."""
    toolkit = Toolkit(meta_tool=True)
    try:
        toolkit.add(reset_tools)
    except DuplicateToolError:
        return  # refusing up front is a correct answer too
    with pytest.raises(DuplicateToolError):
        toolkit.create_group("web")
    assert [g.name for g in toolkit.groups] == ["basic"]


# -- 3. groups -------------------------------------------------------------------------------------


def test_basic_group_is_always_present_and_active():
    toolkit = Toolkit()
    assert [g.name for g in toolkit.groups] == ["basic"]
    assert toolkit.group("basic").active
    toolkit.add(echo)
    assert toolkit.group_of("echo") == "basic"


def test_create_group_defaults_inactive_and_duplicate_is_refused():
    toolkit = Toolkit()
    group = toolkit.create_group("web", "Web tools", notes="Be polite.")
    assert (group.name, group.description, group.active, group.notes) == (
        "web",
        "Web tools",
        False,
        "Be polite.",
    )
    with pytest.raises(GroupError, match="already exists"):
        toolkit.create_group("web", "again")
    with pytest.raises(GroupError, match="already exists"):
        toolkit.create_group("basic")
    assert toolkit.group("web").description == "Web tools"


def test_adding_to_unknown_group_says_how_to_create_it():
    toolkit = Toolkit()
    with pytest.raises(GroupError, match=r"create_group\('web'"):
        toolkit.add(search_web, group="web")
    assert len(toolkit) == 0


async def test_tools_of_inactive_groups_are_hidden_and_not_callable():
    toolkit = grouped_toolkit()
    assert names(toolkit) == ["echo"]
    assert names(toolkit, active_only=False) == ["echo", "search_web", "fetch_page", "run_sql"]
    for fmt, key in (("openai", None), ("anthropic", "name"), ("mcp", "name")):
        rendered = toolkit.schemas(fmt)  # type: ignore[arg-type]
        shown = [s["function"]["name"] if key is None else s[key] for s in rendered]
        assert shown == ["echo"]
    result = await call(toolkit, "search_web", {"query": "q"})
    assert result.status == "error"
    assert result.error is not None
    assert result.error.type == "UnknownToolError"
    assert "inactive group 'web'" in result.error.message
    assert "activate('web')" in result.error.message
    assert "reset_tools" in result.error.message


async def test_activate_and_deactivate():
    toolkit = grouped_toolkit()
    assert toolkit.activate("web") == ["web"]
    assert toolkit.activate("web") == []  # already active
    assert names(toolkit) == ["echo", "search_web", "fetch_page"]
    assert (await call(toolkit, "search_web", {"query": "q"})).text == "results for q"
    toolkit.deactivate("web")
    assert names(toolkit) == ["echo"]
    assert (await call(toolkit, "search_web", {"query": "q"})).status == "error"


def test_set_active_is_a_delta_by_default():
    toolkit = grouped_toolkit()
    toolkit.activate("web")
    assert toolkit.set_active({"db": True}) == ["db"]
    assert active_groups(toolkit) == ["basic", "web", "db"]
    toolkit.set_active({"web": False})
    assert active_groups(toolkit) == ["basic", "db"]


def test_set_active_reset_is_the_final_state():
    toolkit = grouped_toolkit()
    toolkit.activate("web")
    assert toolkit.set_active({"db": True}, reset=True) == ["db"]
    assert active_groups(toolkit) == ["basic", "db"]
    toolkit.set_active({}, reset=True)
    assert active_groups(toolkit) == ["basic"]
    assert names(toolkit) == ["echo"]


def test_basic_cannot_be_deactivated():
    toolkit = grouped_toolkit()
    toolkit.activate("web")
    with pytest.raises(GroupError, match="basic"):
        toolkit.deactivate("basic")
    with pytest.raises(GroupError, match="basic"):
        toolkit.set_active({"web": False, "basic": False})
    assert active_groups(toolkit) == ["basic", "web"]
    toolkit.set_active({"basic": True})  # harmless
    assert active_groups(toolkit) == ["basic", "web"]


def test_unknown_group_in_set_active_changes_nothing():
    toolkit = grouped_toolkit()
    toolkit.activate("web")
    revision = toolkit.revision
    with pytest.raises(GroupError, match="'nope'"):
        toolkit.set_active({"db": True, "web": False, "nope": True})
    with pytest.raises(GroupError, match="'nope'"):
        toolkit.set_active({"db": True, "nope": True}, reset=True)
    with pytest.raises(GroupError):
        toolkit.activate("db", "nope")
    assert active_groups(toolkit) == ["basic", "web"]
    assert names(toolkit) == ["echo", "search_web", "fetch_page"]
    assert toolkit.revision == revision


async def test_remove_group_removes_its_tools():
    toolkit = grouped_toolkit()
    toolkit.activate("web")
    removed = toolkit.remove_group("web")
    assert [t.name for t in removed] == ["search_web", "fetch_page"]
    assert [g.name for g in toolkit.groups] == ["basic", "db"]
    assert names(toolkit, active_only=False) == ["echo", "run_sql"]
    assert "search_web" not in toolkit
    assert schema_names(toolkit) == ["echo"]
    result = await call(toolkit, "search_web", {"query": "q"})
    assert result.status == "error"
    assert result.error is not None
    assert "inactive" not in result.error.message  # it is gone, not merely switched off
    with pytest.raises(GroupError):
        toolkit.group("web")


def test_remove_basic_or_unknown_group_is_refused():
    toolkit = grouped_toolkit()
    with pytest.raises(GroupError, match="basic"):
        toolkit.remove_group("basic")
    with pytest.raises(GroupError, match="'nope'"):
        toolkit.remove_group("nope")
    assert "echo" in toolkit
    assert [g.name for g in toolkit.groups] == ["basic", "web", "db"]


def test_notes_of_active_groups_only():
    toolkit = grouped_toolkit()
    assert toolkit.notes() == ""
    toolkit.activate("web")
    assert "Cite every URL." in toolkit.notes()
    assert "Read-only SQL only." not in toolkit.notes()
    toolkit.set_active({"db": True}, reset=True)
    assert "Read-only SQL only." in toolkit.notes()
    assert "Cite every URL." not in toolkit.notes()


# -- 4. the reset_tools meta tool ------------------------------------------------------------------


def test_meta_tool_appears_with_groups_and_disappears_without():
    toolkit = Toolkit(meta_tool=True)
    toolkit.add(echo)
    assert "reset_tools" not in toolkit
    assert schema_names(toolkit) == ["echo"]
    toolkit.create_group("web", "Search and fetch web pages")
    assert "reset_tools" in schema_names(toolkit)
    toolkit.create_group("db", "Query the database")
    toolkit.remove_group("web")
    assert "reset_tools" in schema_names(toolkit)
    toolkit.remove_group("db")
    assert "reset_tools" not in toolkit
    assert schema_names(toolkit) == ["echo"]


def test_meta_tool_schema_has_one_boolean_per_group():
    toolkit = grouped_toolkit(meta_tool=True)
    toolkit.create_group("files")  # no description
    meta = toolkit.get("reset_tools")
    assert toolkit.group_of("reset_tools") == "basic"
    properties = meta.parameters["properties"]
    assert list(properties) == ["web", "db", "files"]
    assert all(p["type"] == "boolean" for p in properties.values())
    assert properties["web"]["description"] == "Search and fetch web pages"
    assert properties["db"]["description"] == "Query the database"
    assert properties["files"]["description"]  # something, even without a group description
    assert "basic" not in properties
    for fmt, key in (("openai", None), ("anthropic", "input_schema"), ("mcp", "inputSchema")):
        rendered = {
            (s["function"]["name"] if key is None else s["name"]): s
            for s in toolkit.schemas(fmt)  # type: ignore[arg-type]
        }
        params = (
            rendered["reset_tools"]["function"]["parameters"]
            if key is None
            else rendered["reset_tools"][key]
        )
        assert list(params["properties"]) == ["web", "db", "files"]


async def test_meta_tool_sets_the_final_state():
    toolkit = grouped_toolkit(meta_tool=True)
    toolkit.activate("db")
    async with Engine(toolkit) as engine:
        result = await engine.call(ToolCall(name="reset_tools", arguments={"web": True}))
        assert result.status == "ok", result.text
        assert active_groups(toolkit) == ["basic", "web"]  # db switched off: final state
        assert "Active tool groups: web." in result.text
        assert "Search and fetch web pages" in result.text
        assert "Cite every URL." in result.text
        assert "Query the database" not in result.text
        assert (await engine.call(ToolCall(name="search_web", arguments={"query": "q"}))).ok
        assert not (await engine.call(ToolCall(name="run_sql", arguments={"sql": "s"}))).ok

        result = await engine.call(
            ToolCall(name="reset_tools", arguments={"web": True, "db": True})
        )
        assert active_groups(toolkit) == ["basic", "web", "db"]
        assert "Active tool groups: web, db." in result.text
        assert "Query the database" in result.text
        assert "Read-only SQL only." in result.text
        # web was already active: its description and notes are not repeated
        assert "Search and fetch web pages" not in result.text
        assert "Cite every URL." not in result.text

        result = await engine.call(ToolCall(name="reset_tools", arguments={}))
        assert result.ok
        assert active_groups(toolkit) == ["basic"]
        assert "Active tool groups: none." in result.text
        assert "reset_tools" in schema_names(toolkit)  # the meta tool itself stays


async def test_meta_tool_unknown_group_is_an_argument_error():
    toolkit = grouped_toolkit(meta_tool=True)
    toolkit.activate("web")
    result = await call(toolkit, "reset_tools", {"web": True, "mail": True})
    assert result.status == "error"
    assert result.error is not None
    assert result.error.type == "ArgumentError"
    assert "mail" in result.error.message
    assert "extra" in result.error.message.lower()
    assert active_groups(toolkit) == ["basic", "web"]


def test_meta_tool_never_appears_without_meta_tool_option():
    toolkit = grouped_toolkit()
    toolkit.activate("web", "db")
    assert "reset_tools" not in toolkit
    assert "reset_tools" not in schema_names(toolkit)
    toolkit.add(reset_tools)  # the name is free for the user's own tool
    assert toolkit.get("reset_tools").source is reset_tools


@pytest.mark.parametrize("group", ["_drafts", "model_config"])
async def test_meta_tool_offers_every_group_the_toolkit_accepts(group: str):
    """Each group the toolkit accepts must be switchable through reset_tools (or be refused
    cleanly by create_group, leaving no group behind)."""
    toolkit = Toolkit(meta_tool=True)
    try:
        toolkit.create_group(group, "Odd name")
    except StockadeError:
        assert [g.name for g in toolkit.groups] == ["basic"]
        return
    assert group in toolkit.get("reset_tools").parameters["properties"]
    result = await call(toolkit, "reset_tools", {group: True})
    assert result.status == "ok", result.text
    assert toolkit.group(group).active


# -- 5. presets -----------------------------------------------------------------------------------


def test_presets_are_hidden_from_every_schema_format():
    toolkit = Toolkit()
    toolkit.add(fetch, presets={"api_key": "sk-123"})
    openai = toolkit.schemas("openai")[0]["function"]["parameters"]
    anthropic = toolkit.schemas("anthropic")[0]["input_schema"]
    mcp = toolkit.schemas("mcp")[0]["inputSchema"]
    for params in (openai, anthropic, mcp):
        assert list(params["properties"]) == ["url"]
        assert params.get("required", []) == ["url"]
        assert "sk-123" not in json.dumps(params)


async def test_presets_are_always_passed():
    toolkit = Toolkit()
    toolkit.add(fetch, presets={"api_key": "sk-123"})
    result = await call(toolkit, "fetch", {"url": "u"})
    assert result.text == "u with sk-123"
    assert "ignored_arguments" not in result.metadata
    assert "warnings" not in result.metadata


@pytest.mark.parametrize(
    "arguments", [{"url": "u", "api_key": "stolen"}, '{"url": "u", "api_key": "stolen"}']
)
async def test_model_value_for_a_preset_is_ignored_and_reported(arguments: Any):
    toolkit = Toolkit()
    toolkit.add(fetch, presets={"api_key": "sk-123"})
    result = await call(toolkit, "fetch", arguments)
    assert result.status == "ok"
    assert result.text == "u with sk-123"
    assert result.metadata["ignored_arguments"] == ["api_key"]
    warnings = result.metadata["warnings"]
    assert any("api_key" in w and "ignored" in w for w in warnings)


async def test_partial_bound_keyword_behaves_like_a_preset():
    toolkit = Toolkit()
    toolkit.add(functools.partial(fetch, api_key="sk-partial"))
    params = toolkit.schemas("mcp")[0]["inputSchema"]
    assert list(params["properties"]) == ["url"]
    result = await call(toolkit, "fetch", {"url": "u", "api_key": "stolen"})
    assert result.text == "u with sk-partial"
    assert result.metadata["ignored_arguments"] == ["api_key"]
    assert any("api_key" in w for w in result.metadata["warnings"])


async def test_presets_on_a_tool_base():
    toolkit = Toolkit()
    toolkit.add(Reverse(), presets={"secret": "s3"})
    assert list(toolkit.get("reverse").parameters["properties"]) == ["text"]
    result = await call(toolkit, "reverse", {"text": "ab", "secret": "stolen"})
    assert result.text == "ba|s3"
    assert result.metadata["ignored_arguments"] == ["secret"]


def test_preset_naming_no_parameter_is_refused():
    toolkit = Toolkit()
    with pytest.raises(ToolDefinitionError, match="'token'"):
        toolkit.add(fetch, presets={"token": "x"})
    with pytest.raises(ToolDefinitionError, match="'token'"):
        toolkit.add(Reverse(), presets={"token": "x"})
    assert len(toolkit) == 0


# -- 6. context injection -----------------------------------------------------------------------


async def test_context_at_toolkit_level():
    toolkit = Toolkit(context=[Database("toolkit-db")])
    toolkit.add(db_name)
    assert (await call(toolkit, "db_name", {"sql": "s"})).text == "toolkit-db"


async def test_context_agent_beats_toolkit():
    toolkit = Toolkit(context=[Database("toolkit-db")])
    toolkit.add(db_name)
    async with Engine(toolkit, context=[Database("agent-db")]) as engine:
        result = await engine.call(ToolCall(name="db_name", arguments={"sql": "s"}))
    assert result.text == "agent-db"


async def test_context_call_beats_toolkit():
    toolkit = Toolkit(context=[Database("toolkit-db")])
    toolkit.add(db_name)
    result = await call(toolkit, "db_name", {"sql": "s"}, context=[Database("call-db")])
    assert result.text == "call-db"


async def test_context_call_beats_agent_and_toolkit():
    toolkit = Toolkit(context=[Database("toolkit-db")])
    toolkit.add(db_name)
    async with Engine(toolkit, context=[Database("agent-db")]) as engine:
        request = ToolCall(name="db_name", arguments={"sql": "s"})
        with_call = await engine.call(request, context=[Database("call-db")])
        without_call = await engine.call(ToolCall(name="db_name", arguments={"sql": "s"}))
    assert with_call.text == "call-db"
    assert without_call.text == "agent-db"


async def test_context_call_beats_agent_without_toolkit_level():
    toolkit = Toolkit()
    toolkit.add(db_name)
    async with Engine(toolkit, context=[Database("agent-db")]) as engine:
        request = ToolCall(name="db_name", arguments={"sql": "s"})
        result = await engine.call(request, context={Database: Database("call-db")})
    assert result.text == "call-db"


async def test_subclass_instance_satisfies_base_class_parameter():
    toolkit = Toolkit()
    toolkit.add(db_name)
    result = await call(toolkit, "db_name", {"sql": "s"}, context=[ReplicaDatabase("replica")])
    assert result.text == "replica"
    # the nearer level wins even when it holds only a subclass instance
    toolkit = Toolkit(context=[Database("exact-but-far")])
    toolkit.add(db_name)
    result = await call(toolkit, "db_name", {"sql": "s"}, context=[ReplicaDatabase("near")])
    assert result.text == "near"


def test_injected_parameters_never_appear_in_schemas():
    toolkit = Toolkit()
    toolkit.add(db_name)
    toolkit.add(maybe_db)
    toolkit.add(progress)
    toolkit.add(whoami)
    for fmt in ("openai", "anthropic", "mcp"):
        text = json.dumps(toolkit.schemas(fmt))  # type: ignore[arg-type]
        for hidden in ('"db"', '"emitter"', '"ctx"'):
            assert hidden not in text, (fmt, hidden)
    assert toolkit.get("db_name").parameters["required"] == ["sql"]
    assert toolkit.get("whoami").parameters["properties"] == {}


async def test_missing_required_context_is_an_error_result():
    toolkit = Toolkit()
    toolkit.add(db_name)
    result = await call(toolkit, "db_name", {"sql": "s"}, context=[User("ann")])
    assert result.status == "error"
    assert result.error is not None
    assert result.error.type == "ContextMissingError"
    assert "Database" in result.error.message
    assert "context=[obj]" in result.error.message
    assert ContextMissingError.__name__ == result.error.type


async def test_optional_context_receives_none_when_absent():
    toolkit = Toolkit()
    toolkit.add(maybe_db)
    assert (await call(toolkit, "maybe_db")).text == "no database"
    assert (await call(toolkit, "maybe_db", context=[Database("d")])).text == "d"


async def test_emitter_is_a_silent_no_op_under_call():
    toolkit = Toolkit()
    toolkit.add(progress)
    result = await call(toolkit, "progress", {"steps": 3})
    assert result.status == "ok"
    assert result.text == "Emitter active=False"


async def test_tool_context_gives_call_id_and_lookup():
    toolkit = Toolkit(context=[User("ann")])
    toolkit.add(whoami)
    async with Engine(toolkit) as engine:
        request = ToolCall(name="whoami", id="call_42")
        assert (await engine.call(request)).text == "call_42|ann"
        request = ToolCall(name="whoami", id="call_43")
        assert (await engine.call(request, context=[User("bob")])).text == "call_43|bob"


# -- 7. postprocess hooks -----------------------------------------------------------------------


async def test_postprocess_returning_none_keeps_the_result():
    seen: list[tuple[str, str]] = []

    def hook(request: ToolCall, result: ToolResult) -> None:
        seen.append((request.name, result.text))

    toolkit = Toolkit()
    toolkit.add(echo, postprocess=hook)
    result = await call(toolkit, "echo", {"text": "hi"})
    assert (result.status, result.text) == ("ok", "hi")
    assert seen == [("echo", "hi")]


async def test_postprocess_can_replace_the_result():
    def redact(request: ToolCall, result: ToolResult) -> ToolResult:
        return ToolResult(call_id=result.call_id, tool=result.tool, status="ok", content=[])

    toolkit = Toolkit()
    toolkit.add(echo, postprocess=redact)
    result = await call(toolkit, "echo", {"text": "secret"})
    assert result.status == "ok"
    assert result.content == []
    assert "secret" not in result.text


async def test_postprocess_that_raises_is_an_error_naming_the_hook():
    def broken(request: ToolCall, result: ToolResult) -> None:
        raise RuntimeError("hook exploded")

    toolkit = Toolkit()
    toolkit.add(echo, postprocess=broken)
    result = await call(toolkit, "echo", {"text": "hi"})
    assert result.status == "error"
    assert result.error is not None
    assert result.error.type == "RuntimeError"
    assert "postprocess" in result.error.message
    assert "hook exploded" in result.error.message


async def test_postprocess_returning_a_non_result_is_an_error():
    def wrong(request: ToolCall, result: ToolResult) -> str:
        return "not a result"

    toolkit = Toolkit()
    toolkit.add(echo, postprocess=wrong)  # type: ignore[arg-type]
    result = await call(toolkit, "echo", {"text": "hi"})
    assert result.status == "error"
    assert result.error is not None
    assert result.error.type == OutputError.__name__
    assert "str" in result.error.message
    assert "postprocess" in result.error.message


# -- 8. finish function ---------------------------------------------------------------------------


async def test_finish_function_records_the_validated_answer():
    toolkit = Toolkit()
    registered = toolkit.set_finish(Answer)
    assert registered.name == "generate_response"
    assert toolkit.group_of("generate_response") == "basic"
    assert set(registered.parameters["properties"]) == {"summary", "confidence", "sources"}
    arguments = {"summary": "done", "confidence": 0.5}
    result = await call(toolkit, "generate_response", arguments)
    assert result.status == "ok", result.text
    expected = Answer.model_validate(arguments).model_dump(mode="json")
    assert result.metadata["response"] == expected
    assert result.metadata["finished"] is True


async def test_finish_function_with_custom_name():
    toolkit = Toolkit()
    toolkit.set_finish(Verdict, name="give_verdict", description="Deliver the verdict.")
    assert "generate_response" not in toolkit
    assert toolkit.get("give_verdict").description == "Deliver the verdict."
    result = await call(toolkit, "give_verdict", {"guilty": False})
    assert result.metadata == {"response": {"guilty": False}, "finished": True}


async def test_finish_function_invalid_arguments_name_the_field():
    toolkit = Toolkit()
    toolkit.set_finish(Answer)
    result = await call(toolkit, "generate_response", {"summary": "x", "confidence": 7})
    assert result.status == "error"
    assert result.error is not None
    assert result.error.type == ArgumentError.__name__
    assert "confidence" in result.error.message
    assert "finished" not in result.metadata
    result = await call(toolkit, "generate_response", {"confidence": 0.1})
    assert result.error is not None
    assert "summary" in result.error.message


async def test_set_finish_again_replaces_the_previous():
    toolkit = Toolkit()
    toolkit.set_finish(Answer)
    toolkit.set_finish(Verdict, name="give_verdict")
    assert "generate_response" not in toolkit
    assert "generate_response" not in schema_names(toolkit)
    assert (await call(toolkit, "generate_response", {"summary": "x", "confidence": 0})).error
    result = await call(toolkit, "give_verdict", {"guilty": True})
    assert result.metadata["response"] == {"guilty": True}
    toolkit.set_finish(Answer)  # back to the default name
    assert names(toolkit) == ["generate_response"]


def test_failed_set_finish_keeps_the_previous_finish_function():
    toolkit = Toolkit()
    toolkit.set_finish(Answer)
    toolkit.add(echo, name="answer")
    with pytest.raises(DuplicateToolError):
        toolkit.set_finish(Verdict, name="answer")
    assert "generate_response" in toolkit
    assert toolkit.get("answer").source is echo


# -- 9. state_dict / load_state_dict ---------------------------------------------------------------


def _register_plain_tools(toolkit: Toolkit) -> None:
    for fn in (echo, search_web, fetch_page, run_sql):
        toolkit.add(fn)


def test_state_round_trip_into_a_fresh_toolkit():
    original = grouped_toolkit(meta_tool=True)
    original.activate("db")
    original.set_finish(Verdict)
    state = json.loads(json.dumps(original.state_dict()))

    fresh = Toolkit(meta_tool=True)
    _register_plain_tools(fresh)
    fresh.load_state_dict(state)
    assert [(g.name, g.description, g.active, g.notes) for g in fresh.groups] == [
        (g.name, g.description, g.active, g.notes) for g in original.groups
    ]
    assert {n: fresh.group_of(n) for n in ("echo", "search_web", "fetch_page", "run_sql")} == {
        "echo": "basic",
        "search_web": "web",
        "fetch_page": "web",
        "run_sql": "db",
    }
    assert sorted(names(fresh)) == ["echo", "reset_tools", "run_sql"]
    assert list(fresh.get("reset_tools").parameters["properties"]) == ["web", "db"]
    assert fresh.notes() == original.notes()
    assert fresh.state_dict() == state


def test_state_dict_is_json_and_excludes_managed_tools(tmp_path: Path):
    toolkit = grouped_toolkit(meta_tool=True)
    toolkit.set_finish(Verdict)
    _write_skill(tmp_path / "a", "alpha", "First skill.")
    toolkit.add_skills(tmp_path)
    state = toolkit.state_dict()
    assert json.loads(json.dumps(state)) == state
    assert set(state["tools"]) == {"echo", "search_web", "fetch_page", "run_sql"}
    assert state["groups"]["web"] == {
        "description": "Search and fetch web pages",
        "active": False,
        "notes": "Cite every URL.",
    }


def test_state_naming_an_unregistered_tool_changes_nothing():
    state = grouped_toolkit().state_dict()
    fresh = Toolkit()
    fresh.add(echo)
    fresh.add(search_web)  # fetch_page and run_sql are missing
    revision = fresh.revision
    with pytest.raises(GroupError, match="fetch_page"):
        fresh.load_state_dict(state)
    assert [g.name for g in fresh.groups] == ["basic"]
    assert fresh.group_of("search_web") == "basic"
    assert fresh.revision == revision


def test_state_deactivating_basic_is_refused():
    toolkit = grouped_toolkit()
    state = toolkit.state_dict()
    state["groups"]["basic"]["active"] = False
    state["groups"]["web"]["active"] = True
    with pytest.raises(GroupError, match="basic"):
        toolkit.load_state_dict(state)
    assert active_groups(toolkit) == ["basic"]


@pytest.mark.parametrize(
    "state",
    [
        {},
        {"groups": {}},
        {"version": 2, "groups": {}, "tools": {}},
        {"groups": "web", "tools": {}},
        {"groups": {"web": {"active": "very"}}, "tools": {}},
        {"groups": {"web": {"colour": "red"}}, "tools": {}},
        {"groups": {}, "tools": {}, "extra": 1},
        {"groups": {}, "tools": {"echo": "nowhere"}},
    ],
)
def test_malformed_state_is_a_group_error(state: dict[str, Any]):
    toolkit = grouped_toolkit()
    before = toolkit.state_dict()
    with pytest.raises(GroupError):
        toolkit.load_state_dict(state)
    assert toolkit.state_dict() == before


def test_state_with_an_invalid_group_name_is_a_group_error():
    toolkit = grouped_toolkit()
    before = toolkit.state_dict()
    with pytest.raises(GroupError):
        toolkit.load_state_dict({"groups": {"bad name!": {}}, "tools": {}})
    assert toolkit.state_dict() == before


def test_state_cannot_move_toolkit_managed_tools_out_of_basic():
    toolkit = grouped_toolkit()
    toolkit.set_finish(Verdict)
    state = toolkit.state_dict()
    state["tools"]["generate_response"] = "web"
    with contextlib.suppress(GroupError):  # refusing the state is fine; obeying it is not
        toolkit.load_state_dict(state)
    assert toolkit.group_of("generate_response") == "basic"
    assert "generate_response" in names(toolkit)


# -- 10. skills ------------------------------------------------------------------------------------


def _write_skill(folder: Path, name: str, description: str, body: str = "") -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / "SKILL.md"
    path.write_text(
        f"---\nname: {name}\ndescription: {description}\n---\n# {name}\n{body}\n", encoding="utf-8"
    )
    return path


@pytest.fixture
def skill_root(tmp_path: Path) -> Path:
    root = tmp_path / "skills"
    _write_skill(root / "pdf", "pdf-tools", "Work with PDF files.", "Use pdftotext first.")
    _write_skill(root / "sql", "sql-review", "Review SQL queries.", "Check every JOIN.")
    (root / "notes").mkdir()
    (root / "notes" / "README.md").write_text("not a skill", encoding="utf-8")
    return root


async def test_add_skills_loads_skill_folders_and_offers_view_skill(skill_root: Path):
    toolkit = Toolkit()
    found = toolkit.add_skills(skill_root)
    assert sorted(s.name for s in found) == ["pdf-tools", "sql-review"]
    assert sorted(s.name for s in toolkit.skills) == ["pdf-tools", "sql-review"]
    assert "view_skill" in schema_names(toolkit)
    assert toolkit.group_of("view_skill") == "basic"
    result = await call(toolkit, "view_skill", {"name": "pdf-tools"})
    assert result.status == "ok"
    assert result.text == (skill_root / "pdf" / "SKILL.md").read_text(encoding="utf-8")
    assert "Use pdftotext first." in result.text


async def test_view_skill_unknown_name_lists_skills(skill_root: Path):
    toolkit = Toolkit()
    toolkit.add_skills(skill_root)
    result = await call(toolkit, "view_skill", {"name": "excel"})
    assert result.status == "error"
    assert result.error is not None
    assert "excel" in result.error.message
    assert "pdf-tools" in result.error.message
    assert "sql-review" in result.error.message


def test_skills_prompt_lists_names_and_descriptions(skill_root: Path):
    toolkit = Toolkit()
    assert toolkit.skills_prompt() == ""
    toolkit.add_skills(skill_root)
    prompt = toolkit.skills_prompt()
    assert "- pdf-tools: Work with PDF files." in prompt.splitlines()
    assert "- sql-review: Review SQL queries." in prompt.splitlines()
    assert "view_skill" in prompt


def test_a_single_skill_folder_can_be_the_root(tmp_path: Path):
    _write_skill(tmp_path, "solo", "Just one.")
    toolkit = Toolkit()
    assert [s.name for s in toolkit.add_skills(tmp_path)] == ["solo"]


async def test_later_skill_with_same_name_replaces_earlier(tmp_path: Path):
    _write_skill(tmp_path / "v1" / "pdf", "pdf-tools", "Old description.", "old body")
    _write_skill(tmp_path / "v2" / "pdf", "pdf-tools", "New description.", "new body")
    toolkit = Toolkit()
    toolkit.add_skills(tmp_path / "v1")
    toolkit.add_skills(tmp_path / "v2")
    assert [(s.name, s.description) for s in toolkit.skills] == [("pdf-tools", "New description.")]
    assert names(toolkit).count("view_skill") == 1
    result = await call(toolkit, "view_skill", {"name": "pdf-tools"})
    assert "new body" in result.text
    assert "old body" not in result.text


def test_skills_root_must_exist(tmp_path: Path):
    toolkit = Toolkit()
    with pytest.raises(SkillError, match="missing"):
        toolkit.add_skills(tmp_path / "missing")
    assert "view_skill" not in toolkit


def test_skills_root_without_any_skill_md(tmp_path: Path):
    (tmp_path / "empty").mkdir()
    (tmp_path / "empty" / "notes.md").write_text("hello", encoding="utf-8")
    toolkit = Toolkit()
    with pytest.raises(SkillError, match=r"SKILL\.md"):
        toolkit.add_skills(tmp_path)
    assert "view_skill" not in toolkit


@pytest.mark.parametrize(
    ("text", "problem"),
    [
        ("# no front matter\n", "front matter"),
        ("---\nname: x\ndescription: y\n# never closed\n", "not closed"),
        ("---\nname: [unclosed\ndescription: y\n---\nbody\n", "YAML"),
        ("---\n- a\n- b\n---\nbody\n", "mapping"),
        ("---\nname: x\n---\nbody\n", "description"),
        ("---\ndescription: y\n---\nbody\n", "name"),
        ("---\nname: x\ndescription: '   '\n---\nbody\n", "description"),
    ],
)
def test_malformed_skill_files_name_the_file(tmp_path: Path, text: str, problem: str):
    _write_skill(tmp_path / "good", "good", "A good skill.")
    bad = tmp_path / "zz_bad" / "SKILL.md"
    bad.parent.mkdir()
    bad.write_text(text, encoding="utf-8")
    toolkit = Toolkit()
    with pytest.raises(SkillError) as info:
        toolkit.add_skills(tmp_path)
    assert str(bad) in str(info.value)
    assert problem in str(info.value)
    assert toolkit.skills == []  # all or nothing: the good skill was not loaded either


def test_user_tool_cannot_take_the_skill_viewer_name(skill_root: Path):
    def view_skill(name: str) -> str:
        return name

    toolkit = Toolkit()
    toolkit.add_skills(skill_root)
    with pytest.raises(DuplicateToolError, match="view_skill"):
        toolkit.add(view_skill)


# -- 11. ToolRegistry ----------------------------------------------------------------------------


def _registry() -> ToolRegistry:
    registry = ToolRegistry()
    for fn in (echo, search_web, run_sql):
        registry.register(fn)
    registry.register(fetch, presets={"api_key": "sk-reg"})
    return registry


async def test_registry_toolkits_hold_exactly_the_named_shared_tools():
    registry = _registry()
    library = {t.name: t for t in registry.library}
    researcher = registry.create_toolkit("researcher", ["search_web", "fetch"])
    analyst = registry.create_toolkit("analyst", ["run_sql", "fetch"])
    assert names(researcher) == ["search_web", "fetch"]
    assert names(analyst) == ["run_sql", "fetch"]
    assert researcher.get("fetch") is library["fetch"]
    assert analyst.get("fetch") is library["fetch"]
    assert researcher.get("search_web") is library["search_web"]
    assert (await call(researcher, "fetch", {"url": "u"})).text == "u with sk-reg"
    assert registry.toolkit_for("researcher") is researcher
    assert registry.toolkit_for("nobody") is None
    assert registry.agents == ["researcher", "analyst"]


def test_registry_all_tools_when_no_names_given():
    registry = _registry()
    toolkit = registry.create_toolkit("generalist")
    assert names(toolkit) == ["echo", "search_web", "run_sql", "fetch"]


def test_registry_unknown_tool_names_are_named():
    registry = _registry()
    with pytest.raises(UnknownToolError, match=r"'shell'.*'browser'|'browser'.*'shell'"):
        registry.create_toolkit("hacker", ["echo", "shell", "browser"])
    assert registry.toolkit_for("hacker") is None
    registry.create_toolkit("hacker", ["echo"])  # the failed attempt reserved nothing


def test_registry_duplicate_agent_and_duplicate_tool():
    registry = _registry()
    first = registry.create_toolkit("a", ["echo"])
    with pytest.raises(DuplicateToolError, match="toolkit_for"):
        registry.create_toolkit("a", ["run_sql"])
    assert registry.toolkit_for("a") is first
    with pytest.raises(DuplicateToolError, match="echo"):
        registry.register(echo_upper, name="echo")


async def test_agent_engine_cannot_call_tools_outside_its_toolkit():
    registry = _registry()
    toolkit = registry.create_toolkit("reader", ["echo"], context=[Database("reader-db")])
    assert isinstance(toolkit, Toolkit)
    result = await call(toolkit, "run_sql", {"sql": "DROP TABLE users"})
    assert result.status == "error"
    assert result.error is not None
    assert result.error.type == "UnknownToolError"
    assert "run_sql" in result.error.message
    assert (await call(toolkit, "echo", {"text": "ok"})).ok


# -- 12. revision ------------------------------------------------------------------------------


def test_revision_increases_on_every_change(skill_root: Path):
    toolkit = Toolkit(meta_tool=True)
    seen = [toolkit.revision]

    def changed() -> None:
        assert toolkit.revision > seen[-1]
        seen.append(toolkit.revision)

    toolkit.add(echo)
    changed()
    toolkit.add_object(Notebook())
    changed()
    toolkit.remove("count")
    changed()
    toolkit.create_group("web", "Web")
    changed()
    toolkit.add(search_web, group="web")
    changed()
    toolkit.activate("web")
    changed()
    toolkit.deactivate("web")
    changed()
    toolkit.set_active({"web": True}, reset=True)
    changed()
    toolkit.set_finish(Verdict)
    changed()
    toolkit.add_skills(skill_root)
    changed()
    toolkit.load_state_dict(toolkit.state_dict())
    changed()
    toolkit.remove_group("web")
    changed()


def test_schemas_follow_changes():
    toolkit = Toolkit()
    toolkit.add(echo)
    assert schema_names(toolkit) == ["echo"]
    toolkit.add(power)
    assert schema_names(toolkit) == ["echo", "power"]
    toolkit.create_group("web")
    toolkit.add(search_web, group="web")
    assert schema_names(toolkit) == ["echo", "power"]
    toolkit.activate("web")
    assert schema_names(toolkit) == ["echo", "power", "search_web"]
    with pytest.raises(ValueError, match="unknown schema format"):
        toolkit.schemas("gemini")  # type: ignore[arg-type]
