"""Shell sandbox: `run_shell` through the engine, boxed by bubblewrap where it is available.

Three commands under the `default` preset, whose commands need approval (an approver says yes):
one that works and writes a file into the workspace, `rm -rf /` (refused as a dangerous command
before anyone is asked), and `sleep 30` killed at its 0.5-second timeout. It prints the isolation
each command ran under: "bubblewrap", or "none" with the warning that says what that means.

Run: python examples/shell_sandbox.py
"""

import asyncio
import tempfile
from pathlib import Path
from typing import Any

from stockade import Decision, Engine, Mount, Policy, ToolCall, Toolkit, VirtualFS, add_shell_tools
from stockade.sandbox import isolation_available

COMMANDS: list[dict[str, Any]] = [
    {"command": "pwd && echo built > out.txt && ls"},
    {"command": "rm -rf /"},
    {"command": "sleep 30", "timeout_s": 0.5},
]


def approver(call: ToolCall, decision: Decision) -> bool:
    print(f"  approver asked ({decision.rule}: {decision.reason}): yes")
    return True


async def main() -> None:
    print(f"bubblewrap available: {isolation_available()}")
    toolkit = Toolkit()
    add_shell_tools(toolkit)  # run_shell and run_python
    with tempfile.TemporaryDirectory() as folder, VirtualFS([Mount("/workspace", folder)]) as fs:
        async with Engine(toolkit, policy=Policy.preset("default"), fs=fs, approver=approver) as e:
            for arguments in COMMANDS:
                print(f"run_shell {arguments['command']!r}")
                result = await e.call(ToolCall(name="run_shell", arguments=arguments))
                rule = result.decision.rule if result.decision else None
                print(f"  -> {result.status} (rule {rule}, {result.duration_s:.2f}s)")
                print("     " + result.text.replace("\n", "\n     "))
                process = result.metadata.get("process")
                if process is not None:  # a command that ran to its end (not refused or killed)
                    print(f"  isolation: {process['isolation']}, warnings: {process['warnings']}")
        print(f"out.txt on the host: {(Path(folder) / 'out.txt').read_text().strip()!r}")


if __name__ == "__main__":
    asyncio.run(main())
