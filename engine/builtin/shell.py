"""The command tools: ``run_shell`` runs a bash command line, ``run_python`` runs Python code
with the interpreter Stockade itself runs on. Both run through `sandbox.run_process`.

The engine judges a call before it runs: ``run_shell``'s command line is parsed and every
command in it checked against the policy (and its redirections as reads and writes of their
files); ``run_python``'s code is judged as ``python3 -c CODE``. The policy's ``[process]`` table
(injected by type) says whether isolation is required, whether the network is reachable, and the
limits; a call may ask for a shorter timeout, never a longer one. Neither tool is read-only, so
calls of them run one at a time.

Where the machine allows it, the engine gives each run a copy-on-write view of the workspace
(``staging``, injected by the engine): the command sees what it may read, and what it changes
reaches the workspace only once the engine has judged each change (see
`stockade.engine.pipeline._commands`).

    toolkit = Toolkit()
    add_shell_tools(toolkit)
    engine = Engine(toolkit, fs=VirtualFS([Mount("/workspace", "project")]))
"""

from __future__ import annotations

import sys
from typing import Annotated

from pydantic import Field

from stockade.engine.content import ProcessReport, ToolOutput
from stockade.engine.errors import ToolTimeoutError
from stockade.engine.injection import FromContext
from stockade.engine.tools import RegisteredTool, tool
from stockade.engine.tools.catalog import BASIC, ToolCatalog
from stockade.policies import ProcessSpec
from stockade.sandbox import Bubblewrap, Limits, ProcessResult, VirtualFS, run_process_async
from stockade.sandbox.egress import Egress
from stockade.sandbox.views import View

# the engine's own cap on a call (a hard stop, beyond the process's timeout from the policy)
TOOL_TIMEOUT_S = 3600.0


# the fields of the policy's [process] table that are not resource limits: how a run is boxed
# and how long it may take, given to run_process on their own
RUN_SETTINGS = frozenset({"require_isolation", "network", "timeout_s"})


def limits_of(process: ProcessSpec) -> Limits:
    """The sandbox limits the policy's ``[process]`` table sets: every field of the table that
    is not a run setting is a `Limits` field of the same name (a test holds the two to it), so
    a limit added to the table reaches every run. Limits the table does not name keep the
    sandbox's defaults."""
    return Limits(
        **{
            name: getattr(process, name)
            for name in type(process).model_fields
            if name not in RUN_SETTINGS
        }
    )


async def _run(
    command: str | list[str],
    fs: VirtualFS,
    process: ProcessSpec,
    bubblewrap: Bubblewrap,
    timeout_s: float | None,
    staging: View | None,
    egress: Egress | None,
    stdin: bytes | None = None,
) -> ToolOutput:
    """Run under the policy's process settings, boxed as the engine judged the call (the same
    `Bubblewrap`), with the call's filtered network when the policy lists hosts; a call may
    ask for less time, never more."""
    result = await run_process_async(
        command,
        fs=fs,
        timeout=process.timeout_s if timeout_s is None else min(timeout_s, process.timeout_s),
        limits=limits_of(process),
        network=egress if egress is not None else process.network,
        input=stdin,
        bubblewrap=bubblewrap,
        staging=staging,
    )
    return render(result)


def render(result: ProcessResult) -> ToolOutput:
    """What the agent reads: the exit, the output, and every limit or warning that applied;
    the full record in the metadata. A run killed at its timeout is a timed-out call, like any
    other tool's (its output is in the error message)."""
    if result.killed_reason is not None:
        head = f"stopped: {_STOPPED[result.killed_reason]}"
    elif result.signal is not None:
        head = f"ended by signal {result.signal}"
    else:
        head = f"exit code {result.exit_code}"
    lines = [head]
    if result.stdout:
        lines += ["--- stdout ---", result.stdout.rstrip("\n")]
    if result.stderr:
        lines += ["--- stderr ---", result.stderr.rstrip("\n")]
    if result.truncated:
        lines.append(
            f"[output cut: {result.stdout_bytes:,} bytes of stdout and "
            f"{result.stderr_bytes:,} of stderr were written; the first part of each is shown]"
        )
    lines += [f"warning: {w}" for w in result.warnings]
    lines += _network(result)
    if result.timed_out:
        raise ToolTimeoutError("\n".join(lines))
    # the connections reach the audit record and the span through the call's notes
    metadata = result.model_dump(exclude={"stdout", "stderr", "connections"})
    report = ProcessReport(result.isolation, result.exit_code, result.killed_reason)
    return ToolOutput("\n".join(lines), {"process": metadata}, process=report)


def _network(result: ProcessResult) -> list[str]:
    """A line on where a command with a filtered network went, and one per host refused."""
    connections = result.connections
    if not connections:
        return []
    refused = [c for c in connections if not c.allowed]
    lines = [
        f"network: {len(connections) - len(refused)} connection(s) allowed, {len(refused)} refused"
    ]
    shown: set[tuple[str, int]] = set()
    for connection in refused:
        if (connection.host, connection.port) not in shown and len(shown) < 10:
            shown.add((connection.host, connection.port))
            lines.append(f"refused: {connection.host}:{connection.port}: {connection.reason}")
    return lines


_STOPPED = {
    "timeout": "the command ran past its time limit and was killed with every process it started",
    "memory": "the command used more memory than allowed",
    "cpu": "the command used more CPU time than allowed",
    "processes": "the command started more processes than allowed",
    "output": "the command wrote far more output than can be kept, and was stopped",
    "file_size": "the command wrote a file larger than allowed",
    "cancelled": "the call was cancelled",
}


@tool(command="command", timeout=TOOL_TIMEOUT_S)
async def run_shell(
    command: str,
    fs: VirtualFS,
    process: Annotated[ProcessSpec, FromContext],
    bubblewrap: Annotated[Bubblewrap, FromContext],
    timeout_s: Annotated[float | None, Field(gt=0)] = None,
    staging: View | None = None,
    egress: Egress | None = None,
) -> ToolOutput:
    """Run a bash command line in the workspace sandbox and return its exit code and output.

    The command runs in /workspace with the same paths as the file tools; /tmp is private to
    this run. What it changes in /workspace is kept once it ends, change by change as the
    policy allows (the result lists any change not kept); protected files read as empty.
    Nothing started by the command outlives it.

    Args:
        command: The bash command line, e.g. "pytest -q tests/test_x.py".
        timeout_s: Seconds before the command is killed (at most the policy's limit).
    """
    return await _run(command, fs, process, bubblewrap, timeout_s, staging, egress)


@tool(command="code", command_prefix=("python3", "-c"), timeout=TOOL_TIMEOUT_S)
async def run_python(
    code: str,
    fs: VirtualFS,
    process: Annotated[ProcessSpec, FromContext],
    bubblewrap: Annotated[Bubblewrap, FromContext],
    timeout_s: Annotated[float | None, Field(gt=0)] = None,
    staging: View | None = None,
    egress: Egress | None = None,
) -> ToolOutput:
    """Run Python code in the workspace sandbox and return what it printed.

    The code runs as a script with the same Python as this engine (its packages included), in
    /workspace. Print what you want to see.

    Args:
        code: The Python source to run.
        timeout_s: Seconds before it is killed (at most the policy's limit).
    """
    # the code comes on standard input: an argument could hold at most 128 KiB
    stdin = code.encode("utf-8", "surrogatepass")
    argv = [sys.executable, "-I", "-"]
    return await _run(argv, fs, process, bubblewrap, timeout_s, staging, egress, stdin)


SHELL_TOOLS = (run_shell, run_python)


def add_shell_tools(toolkit: ToolCatalog, *, group: str = BASIC) -> list[RegisteredTool]:
    """Register ``run_shell`` and ``run_python`` (the engine must be given a VirtualFS)."""
    return [toolkit.add(fn, group=group) for fn in SHELL_TOOLS]
