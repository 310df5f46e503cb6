"""The house as a newcomer finds it: one install name, the public names pinned, imports that run
one way, small modules, one exception root, and a library that loads nothing it does not use.

These read the source and the installed package; a change of layout that breaks one of them is
a change of the contract, to be made here on purpose.
"""

from __future__ import annotations

import ast
import importlib
import inspect
import subprocess
import sys
import textwrap
import zipfile
from collections.abc import Iterator
from pathlib import Path

import pytest

import stockade
from stockade.errors import StockadeError

ROOT = Path(__file__).resolve().parents[1]
PACKAGES = ("engine", "policies", "sandbox")
MAX_LINES = 510  # "about 500": a module past it holds more than one job

# -- reading the source ------------------------------------------------------------------------


def source_modules() -> dict[str, Path]:
    """Every module of the package by its import name, read from the folders (not the links)."""
    found = {"stockade": ROOT / "stockade" / "__init__.py"}
    for path in (ROOT / "stockade").glob("*.py"):
        if path.name != "__init__.py":
            found[f"stockade.{path.stem}"] = path
    for package in PACKAGES:
        for path in sorted((ROOT / package).rglob("*.py")):
            parts = path.relative_to(ROOT).with_suffix("").parts
            if parts[-1] == "__init__":
                parts = parts[:-1]
            found["stockade." + ".".join(parts)] = path
    return found


MODULES = source_modules()


def imports_of(name: str) -> set[str]:
    """The stockade modules ``name`` imports anywhere in its source: at the top, inside
    functions and under ``TYPE_CHECKING`` alike (an import hidden in a function is still an
    arrow)."""
    path = MODULES[name]
    tree = ast.parse(path.read_text(encoding="utf-8"))
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    found: set[str] = set()
    for node in ast.walk(tree):
        targets: list[str] = []
        if isinstance(node, ast.Import):
            targets = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                anchor = package.split(".")
                anchor = anchor[: len(anchor) - node.level + 1]
                base = ".".join([*anchor, base] if base else anchor)
            # ``from package import module`` depends on the module; ``from module import name``
            # on the module
            submodules = [f"{base}.{alias.name}" for alias in node.names]
            targets = [s for s in submodules if s in MODULES] or [base]
        for target in targets:
            while target and target not in MODULES:
                target = target.rpartition(".")[0]  # a name imported from a module
            if target and target != name:
                found.add(target)
    return found


def room_of(name: str) -> str:
    """``stockade.engine.pipeline._attempts`` -> ``engine.pipeline``; top-level engine modules
    are the shared vocabulary, ``engine``."""
    parts = name.split(".")[1:]
    if parts[0] != "engine" or len(parts) < 3 or MODULES[name].name == "__init__.py":
        if parts[0] == "engine" and len(parts) == 2 and MODULES[name].name == "__init__.py":
            return "engine." + parts[1]
        return ".".join(parts[:1]) if parts[0] != "engine" or len(parts) == 1 else "engine"
    return "engine." + parts[1]


# -- 1. one install name -----------------------------------------------------------------------


def test_the_wheel_installs_one_top_level_name_and_ships_the_presets(tmp_path: Path) -> None:
    """A project with folders called engine/ or policies/ of its own is never shadowed."""
    done = subprocess.run(
        [sys.executable, "-m", "pip", "wheel", "-q", "--no-deps", "-w", str(tmp_path), str(ROOT)],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 0, done.stderr
    (wheel,) = tmp_path.glob("stockade-*.whl")
    names = zipfile.ZipFile(wheel).namelist()
    assert {n.split("/")[0] for n in names} == {
        "stockade",
        f"{wheel.name.split('-py3')[0]}.dist-info",
    }
    assert "stockade/policies/presets/default.toml" in names
    assert "stockade/engine/pipeline/engine.py" in names
    assert "stockade/py.typed" in names


def test_a_project_with_its_own_policies_engine_and_sandbox_packages_keeps_them(
    tmp_path: Path,
) -> None:
    for package in PACKAGES:
        (tmp_path / package).mkdir()
        (tmp_path / package / "__init__.py").write_text(f"MINE = {package!r}\n")
    script = textwrap.dedent(
        """
        import engine, policies, sandbox
        from stockade import Engine, Policy, VirtualFS
        from stockade.policies import Decision
        print(engine.MINE, policies.MINE, sandbox.MINE, Engine.__name__, Decision.__name__)
        """
    )
    done = subprocess.run(
        [sys.executable, "-c", script], cwd=tmp_path, capture_output=True, text=True, timeout=60
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.split() == ["engine", "policies", "sandbox", "Engine", "Decision"]


# -- 2. the public names -----------------------------------------------------------------------

PUBLIC: dict[str, list[str]] = {
    "stockade": [
        "AuditLog", "ConfigurationError", "Decision", "Effect", "Engine", "Limits", "Mount",
        "Policy", "PolicyError", "SandboxError", "StockadeError", "ToolBase", "ToolCall",
        "ToolOutput", "ToolResult", "Toolkit", "VirtualFS", "__version__", "add_file_tools",
        "add_shell_tools", "read_audit", "run_process", "tool", "verify_audit",
    ],
    "stockade.engine": [
        "Approve", "Approver", "ArgumentError", "AuditError", "AuditLog", "AuditReport", "BASIC",
        "CallContext", "CallError", "CallNotes", "CallObserver", "ContextMissingError",
        "DuplicateToolError", "Emitter", "Engine", "ErrorInfo", "FileReport", "FormatError",
        "FromContext", "GroupError", "ImageBlock", "Mode", "OutputError", "PermissionDeniedError",
        "ProcessReport", "RegisteredTool", "Retry", "RetryPolicy", "RetryableError", "Skill",
        "SkillError", "StockadeError", "TextBlock", "ToolBase", "ToolCall", "ToolChunk",
        "ToolContext", "ToolDefinitionError", "ToolGroup", "ToolOutput", "ToolRegistry",
        "ToolResult", "ToolSpec", "ToolTimeoutError", "Toolkit", "UnknownToolError",
        "__version__", "add_file_tools", "add_raw_text_tools", "add_shell_tools", "new_call_id",
        "read_audit", "tool", "verify_audit",
    ],
    "stockade.policies": [
        "CallLimits", "CommandLine", "Decision", "Effect", "EgressRules", "Finding",
        "NetworkMode", "NetworkSpec", "PRESETS",
        "PathSpellingError", "Policy", "PolicyError", "Problem", "ProcessSpec", "Request",
        "SimpleCommand", "Suggestion", "canonical", "fold", "lint_policy", "lint_text",
        "parse_command", "strictest", "suggest",
    ],
    "stockade.sandbox": [
        "BOX_PRIVATE_PATHS", "Bubblewrap", "Change", "Connection", "Egress", "ExistsError",
        "FileInfo", "Guard",
        "IsADirectoryError_", "Limits", "Mount", "NotADirectoryError_", "NotFoundError",
        "NotTextError", "PathDeniedError", "PathEscapeError", "ProcessResult", "QuotaError",
        "ReadOnlyError", "SandboxError", "Verdict", "VirtualFS", "isolation_available",
        "openat2_available",
        "run_process", "run_process_async",
    ],
    "stockade.engine.tools": [
        "Mode", "Postprocess", "RegisteredTool", "RetryPolicy", "ToolBase", "ToolSpec",
        "attribute_names", "check_name", "compile_any", "compile_function", "compile_tool_base",
        "tool",
    ],
    "stockade.engine.toolkit": ["BASIC", "META_TOOL", "ToolGroup", "ToolRegistry", "Toolkit"],
    "stockade.engine.builtin": [
        "FILE_TOOLS", "SHELL_TOOLS", "add_file_tools", "add_raw_text_tools", "add_shell_tools",
    ],
    "stockade.engine.observe": [
        "AuditError", "AuditLog", "AuditReport", "CallObserver", "read_audit", "verify_audit",
        "AuditStore", "StoreReport", "read_store", "verify_store",
    ],
    "stockade.engine.pipeline": ["Approve", "Approver", "CallContext", "Engine"],
    "stockade.engine.cli": ["main"],
    "stockade.engine.cluster": [
        "ClusterSession", "ClusterSessions", "SessionInfo", "SessionSpec", "UnknownSessionError",
    ],
}  # fmt: skip


@pytest.mark.parametrize("module_name", sorted(PUBLIC))
def test_the_public_names_are_exactly_these(module_name: str) -> None:
    module = importlib.import_module(module_name)
    assert sorted(module.__all__) == sorted(PUBLIC[module_name])
    for name in module.__all__:
        value = getattr(module, name)  # every name resolves (stockade's load on first use)
        if inspect.isclass(value) or inspect.isfunction(value):
            assert value.__module__.startswith("stockade."), (name, value.__module__)


def test_the_short_place_says_where_each_name_lives_and_nothing_else() -> None:
    homes = stockade._HOME_OF  # type: ignore[attr-defined]
    here = {"ConfigurationError", "StockadeError", "__version__"}
    assert set(homes) | here == set(stockade.__all__)
    for name, home in homes.items():
        assert getattr(importlib.import_module(home), name) is getattr(stockade, name)
    with pytest.raises(AttributeError, match="no attribute 'Enigne'"):
        stockade.Enigne  # type: ignore[attr-defined]  # noqa: B018


def test_every_module_behind_a_face_is_either_public_or_marked_internal() -> None:
    """In the pipeline and the tools' analysis, the step modules are marked internal with a
    leading underscore; they are not imported from outside their room."""
    internal = {n for n in MODULES if n.rpartition(".")[2].startswith("_")}
    assert internal, "no internal modules found: the check reads the wrong tree"
    for name in MODULES:
        for target in imports_of(name):
            if target in internal and not name.startswith(target.rpartition(".")[0]):
                pytest.fail(f"{name} imports {target}, which is internal to its room")


# -- 3. imports run one way --------------------------------------------------------------------


def test_policies_and_sandbox_import_neither_the_engine_nor_each_other() -> None:
    shared = {"stockade.errors", "stockade.version"}
    for name in MODULES:
        top = name.split(".")[1] if name.count(".") else ""
        if top not in ("policies", "sandbox"):
            continue
        own = f"stockade.{top}"
        for target in imports_of(name):
            assert target.startswith(own) or target in shared, f"{name} imports {target}"


def test_the_shared_root_imports_nothing_of_the_three_packages_but_lazily() -> None:
    for name in ("stockade.errors", "stockade.version"):
        assert imports_of(name) <= {"stockade.errors", "stockade.version"}, name
    tree = ast.parse(MODULES["stockade"].read_text(encoding="utf-8"))
    top_level = {
        node.module
        for node in tree.body
        if isinstance(node, ast.ImportFrom) and node.module and node.module.startswith("stockade")
    }
    assert top_level <= {"stockade.errors", "stockade.version"}, top_level


# Which rooms of the engine may import which: each room imports only rooms on an earlier line
# (and its own), so the arrows run one way. The MCP client provides tools, like the shipped
# ones; the MCP server and the command line sit on top.
ENGINE_LAYERS: list[set[str]] = [
    {"engine"},  # the shared vocabulary: errors, messages, content, injection
    {"engine.tools"},
    {"engine.builtin", "engine.formats", "engine.observe", "engine.mcp.client"},
    {"engine.toolkit"},
    {"engine.pipeline"},
    {"engine.mcp.served"},  # a served call as plain JSON, for both MCP servers
    {"engine.mcp.server", "engine.mcp.stdio", "engine.adapters", "engine.cluster"},
    {"engine.cli"},
]


def engine_layer(name: str) -> tuple[int, str]:
    room = "engine.mcp." + name.rsplit(".", 1)[1] if ".engine.mcp." in name else room_of(name)
    for index, rooms in enumerate(ENGINE_LAYERS):
        if room in rooms:
            return index, room
    raise AssertionError(f"{name} is in no layer of ENGINE_LAYERS ({room}); place its room")


def engine_modules() -> list[str]:
    return [n for n in MODULES if n.startswith("stockade.engine.")]


def test_inside_the_engine_each_room_imports_only_rooms_below_it() -> None:
    for name in engine_modules():
        if MODULES[name].name == "__init__.py":
            continue  # a room's face hands on its own room's names
        layer, room = engine_layer(name)
        for target in imports_of(name):
            if not target.startswith("stockade.engine") or target == "stockade.engine":
                assert target != "stockade.engine", f"{name} imports the engine's face"
                continue
            if target.startswith("stockade.engine.") and MODULES[target].name == "__init__.py":
                face_room = room_of(target)
                if face_room == "engine.mcp":
                    continue
                target_layer = next(i for i, r in enumerate(ENGINE_LAYERS) if face_room in r)
                target_room = face_room
            else:
                target_layer, target_room = engine_layer(target)
            assert target_layer < layer or target_room == room, (
                f"{name} ({room}) imports {target} ({target_room}), which is not below it"
            )


def test_there_is_no_import_cycle() -> None:
    graph = {name: imports_of(name) for name in MODULES}
    state: dict[str, int] = {}

    def visit(node: str, path: list[str]) -> Iterator[list[str]]:
        state[node] = 1
        for target in sorted(graph[node]):
            if state.get(target) == 1:
                yield [*path[path.index(target) :], target] if target in path else [node, target]
            elif target not in state:
                yield from visit(target, [*path, target])
        state[node] = 2

    cycles = [c for start in sorted(graph) if start not in state for c in visit(start, [start])]
    # the package faces import their rooms and nothing imports a face back, except stockade's
    # own face, which loads names lazily (its imports are for the type checker)
    real = [c for c in cycles if "stockade" not in c]
    assert real == [], "\n".join(" -> ".join(c) for c in real)


# -- 4. small modules, a small top -------------------------------------------------------------


def test_no_module_is_much_over_500_lines() -> None:
    long = {
        name: lines
        for name, path in MODULES.items()
        if (lines := len(path.read_text(encoding="utf-8").splitlines())) > MAX_LINES
    }
    assert long == {}


def test_the_engine_keeps_only_its_shared_vocabulary_at_the_top() -> None:
    top = sorted(p.name for p in (ROOT / "engine").glob("*.py"))
    assert top == ["__init__.py", "content.py", "errors.py", "injection.py", "messages.py"]


# -- 5. one exception root ---------------------------------------------------------------------

INTERNAL_EXCEPTIONS = {"stockade.engine.pipeline._state.RunFailed"}  # never leaves the engine


def test_every_exception_stockade_raises_on_purpose_is_a_stockade_error() -> None:
    strays = []
    for name in MODULES:
        module = importlib.import_module(name)  # the MCP and CLI modules load their SDKs too
        for value in vars(module).values():
            if (
                inspect.isclass(value)
                and issubclass(value, BaseException)
                and value.__module__ == name
                and not issubclass(value, StockadeError)
                and f"{name}.{value.__name__}" not in INTERNAL_EXCEPTIONS
            ):
                strays.append(f"{name}.{value.__name__}")
    assert strays == []


# -- 6. the library loads nothing it does not use -----------------------------------------------


def loaded_after(statement: str) -> set[str]:
    probe = f"import sys\n{statement}\nprint('\\n'.join(sorted(sys.modules)))"
    done = subprocess.run(
        [sys.executable, "-c", probe], capture_output=True, text=True, timeout=60, check=True
    )
    return set(done.stdout.split())


def test_the_library_loads_no_command_line_mcp_or_tracing_sdk_until_used() -> None:
    loaded = loaded_after("import stockade.engine")
    for heavy in ("mcp", "mcp_types", "typer", "rich", "opentelemetry.sdk.trace", "casbin",
                  "pyfakefs", "yaml", "jsonschema", "uvicorn"):  # fmt: skip
        assert heavy not in loaded, f"import stockade.engine loads {heavy}"


def test_each_package_loads_alone() -> None:
    policies = loaded_after("import stockade.policies")
    assert not {"stockade.engine", "stockade.sandbox"} & policies
    sandbox = loaded_after("import stockade.sandbox")
    assert not {"stockade.engine", "stockade.policies"} & sandbox
