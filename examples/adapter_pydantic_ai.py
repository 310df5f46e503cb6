"""pydantic-ai running Stockade's file tools, the policy's asks as deferred tool approvals.

A hand-written model (pydantic-ai's `FunctionModel`: no network, no API key) makes four calls
in one turn: a write inside the workspace (allowed), a read outside it (denied: the model gets a
failed tool return naming the rule and the reason), and writes to two protected paths,
`.vscode/settings.json` and `.env`, which the `default` preset asks about. The run ends with
both in `DeferredToolRequests` (the metadata say why Stockade asks); a stand-in for a person
approves the editor settings (`True`) and refuses the `.env` write (`StockadeToolset.deny`,
which also records the refusal in Stockade's audit log), and the run is resumed. It prints what
the model was shown of each call, the files on the host, and the audit log's outcome of each
call. The workspace is a temporary folder, removed at the end.

Run: python examples/adapter_pydantic_ai.py
"""

import asyncio
import json
import tempfile
from pathlib import Path

from pydantic_ai import Agent, DeferredToolRequests, DeferredToolResults
from pydantic_ai.messages import (
    ModelMessage,
    ModelRequest,
    ModelResponse,
    TextPart,
    ToolCallPart,
    ToolReturnPart,
)
from pydantic_ai.models.function import AgentInfo, FunctionModel

from stockade import AuditLog, Engine, Mount, Policy, Toolkit, VirtualFS, add_file_tools, read_audit
from stockade.engine.adapters.pydantic_ai import StockadeToolset

CALLS = [
    ToolCallPart("write_file", {"path": "notes.md", "content": "# Notes\n"}, "call_1"),
    ToolCallPart("read_text_file", {"path": "/workspace/../etc/passwd"}, "call_2"),
    ToolCallPart("write_file", {"path": ".vscode/settings.json", "content": "{}\n"}, "call_3"),
    ToolCallPart("write_file", {"path": ".env", "content": "API_KEY=stolen\n"}, "call_4"),
]


def model_reply(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
    """Four calls first; once the tools have answered, a closing sentence."""
    answered = any(
        isinstance(m, ModelRequest) and any(isinstance(p, ToolReturnPart) for p in m.parts)
        for m in messages
    )
    if not answered:
        return ModelResponse(parts=list(CALLS))
    return ModelResponse(parts=[TextPart("Notes written; the key stays as it is.")])


def shown_to_model(messages: list[ModelMessage]) -> dict[str, str]:
    """What the model read of each call: the tool returns in the conversation."""
    return {
        part.tool_call_id: f"{part.outcome}: {part.content}"
        for message in messages
        if isinstance(message, ModelRequest)
        for part in message.parts
        if isinstance(part, ToolReturnPart)
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
    with tempfile.TemporaryDirectory() as folder:
        workspace = prepared(Path(folder))
        with (
            VirtualFS([Mount("/workspace", workspace)]) as fs,
            AuditLog(Path(folder, "audit.jsonl")) as audit,
        ):
            async with Engine(toolkit, policy=Policy.preset("default"), fs=fs, audit=audit) as e:
                toolset = StockadeToolset(e)
                agent = Agent(
                    FunctionModel(model_reply),
                    toolsets=[toolset],
                    output_type=[str, DeferredToolRequests],
                )
                result = await agent.run("Write my notes.")
                requests = result.output
                assert isinstance(requests, DeferredToolRequests)
                print("run ended with calls to approve:")
                answers = DeferredToolResults()
                for part in requests.approvals:
                    why = requests.metadata[part.tool_call_id]
                    print(f"  {part.tool_call_id} {part.tool_name} {part.args_as_json_str()}")
                    print(f"    rule {why['rule']}: {why['reason']}")
                    if ".vscode" in part.args_as_json_str():
                        print(f"    the person says yes to {part.tool_call_id}")
                        answers.approvals[part.tool_call_id] = True
                    else:
                        print(f"    the person says no to {part.tool_call_id}")
                        answers.approvals[part.tool_call_id] = toolset.deny(part)
                result = await agent.run(
                    message_history=result.all_messages(), deferred_tool_results=answers
                )
                print(f"run finished: {result.output}")

            print("the model was shown:")
            for call_id, text in shown_to_model(result.all_messages()).items():
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
