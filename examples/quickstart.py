"""Quickstart: a custom tool and the file tools under a policy, in a temporary workspace.

Registers a tool of your own, loads the `default` policy preset, mounts a temporary folder at
/workspace, and makes four calls: two allowed (a write, then your tool reading it back) and two
denied (a write to the protected `.env`, and a path climbing out of the workspace).

Run: python examples/quickstart.py
"""

import asyncio
import tempfile

from stockade import Engine, Mount, Policy, ToolCall, Toolkit, VirtualFS, add_file_tools, tool


@tool(read_only=True, paths={"path": "read"})
def word_count(path: str, fs: VirtualFS) -> int:
    """Count the words in a text file (relative paths are under /workspace)."""
    return len(fs.read_text(path).split())


async def main() -> None:
    toolkit = Toolkit()
    toolkit.add(word_count)
    add_file_tools(toolkit)  # read_text_file, write_file, edit_file, list_directory ...
    calls = [
        ToolCall(name="write_file", arguments={"path": "notes.txt", "content": "hi from a tool"}),
        ToolCall(name="word_count", arguments={"path": "notes.txt"}),
        ToolCall(name="write_file", arguments={"path": ".env", "content": "API_KEY=stolen"}),
        ToolCall(name="read_text_file", arguments={"path": "/workspace/../etc/passwd"}),
    ]
    with tempfile.TemporaryDirectory() as folder, VirtualFS([Mount("/workspace", folder)]) as fs:
        # the default preset asks before .env, .git/ ...; with no approver, that means no
        async with Engine(toolkit, policy=Policy.preset("default"), fs=fs) as engine:
            for call in calls:
                result = await engine.call(call)
                decision = result.decision
                print(f"{call.name} {call.arguments}\n  -> {result.status}: {result.text}")
                if decision is not None:
                    print(f"     decision {decision.effect.value}, rule {decision.rule}")


if __name__ == "__main__":
    asyncio.run(main())
