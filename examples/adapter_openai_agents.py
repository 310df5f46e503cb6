"""The OpenAI Agents SDK running Stockade's file tools, the policy's asks as the SDK's approvals.

A scripted model (the SDK's own `ScriptedModel`: no network, no API key) makes four calls in
one turn: a write inside the workspace (allowed), a read outside it (denied: the model reads the
rule and the reason), and writes to two protected paths, `.vscode/settings.json` and `.env`,
which the `default` preset asks about. The run stops with both as interruptions; a stand-in for
a person approves the editor settings (the SDK's `state.approve`) and refuses the `.env` write
(`StockadeTools.reject`, which also records the refusal in Stockade's audit log), and the run
goes on. It prints what the model was shown of each call, the files on the host, and the audit
log's outcome of each call. The workspace is a temporary folder, removed at the end.

Run: python examples/adapter_openai_agents.py
"""

import asyncio
import json
import tempfile
from pathlib import Path
from typing import Any

from agents import Agent, RunConfig, Runner
from agents.testing import ScriptedModel, assistant_message, function_call

from stockade import AuditLog, Engine, Mount, Policy, Toolkit, VirtualFS, add_file_tools, read_audit
from stockade.engine.adapters.openai_agents import StockadeTools

CALLS = [
    ("call_1", "write_file", {"path": "notes.md", "content": "# Notes\n"}),
    ("call_2", "read_text_file", {"path": "/workspace/../etc/passwd"}),
    ("call_3", "write_file", {"path": ".vscode/settings.json", "content": "{}\n"}),
    ("call_4", "write_file", {"path": ".env", "content": "API_KEY=stolen\n"}),
]
QUIET = RunConfig(tracing_disabled=True)  # the SDK's traces would go to OpenAI: not here


def shown_to_model(model: ScriptedModel) -> dict[str, str]:
    """What the model read of each call, from the conversation it was last given."""
    last = model.last_call
    items: list[Any] = last.input if last is not None and isinstance(last.input, list) else []
    return {
        item["call_id"]: str(item["output"])
        for item in items
        if isinstance(item, dict) and item.get("type") == "function_call_output"
    }


def prepared(folder: Path) -> Path:
    """The workspace in ``folder``: empty but for a ``.env`` the model must not get at."""
    workspace = folder / "workspace"
    workspace.mkdir()
    (workspace / ".env").write_text("API_KEY=kept\n")
    return workspace


async def main() -> None:
    toolkit = Toolkit()
    add_file_tools(toolkit)
    model = ScriptedModel(
        [
            [function_call(name, args, call_id=call_id) for call_id, name, args in CALLS],
            [assistant_message("Notes written; the key stays as it is.")],
        ]
    )
    with tempfile.TemporaryDirectory() as folder:
        workspace = prepared(Path(folder))
        with (
            VirtualFS([Mount("/workspace", workspace)]) as fs,
            AuditLog(Path(folder, "audit.jsonl")) as audit,
        ):
            async with Engine(toolkit, policy=Policy.preset("default"), fs=fs, audit=audit) as e:
                tools = StockadeTools(e)
                agent = Agent(name="notes", model=model, tools=tools.function_tools())
                result = await Runner.run(agent, "Write my notes.", run_config=QUIET)
                print("run stopped for approval:")
                state = result.to_state()
                for item in result.interruptions:
                    asked = tools.decision(item)
                    print(f"  {item.call_id} {item.tool_name} {item.arguments}")
                    print(f"    rule {asked.rule}: {asked.reason}")
                    if ".vscode" in (item.arguments or ""):
                        print(f"    the person says yes to {item.call_id}")
                        state.approve(item)
                    else:
                        print(f"    the person says no to {item.call_id}")
                        tools.reject(state, item)
                result = await Runner.run(agent, state, run_config=QUIET)
                print(f"run finished: {result.final_output}")

            print("the model was shown:")
            for call_id, text in shown_to_model(model).items():
                print(f"  {call_id}: {text}")
            print("on the host:")
            for name in ("notes.md", ".vscode/settings.json", ".env"):
                print(f"  {name}: {json.dumps((workspace / name).read_text())}")
            audit.flush()
            print("audit log outcomes:")
            for record in read_audit(audit.path, kind="outcome"):
                approval = record.get("approval")
                print(
                    f"  {record['call_id']} {record['status']}"
                    + (f" ({approval})" if approval else "")
                )


if __name__ == "__main__":
    asyncio.run(main())
