"""LangChain tools backed by Stockade: a small agent loop whose tool calls all go through the
engine.

A fake chat model (LangChain's `GenericFakeChatModel` with hand-written replies: no network, no
API key) asks for four calls: a write inside the workspace (allowed), a read outside it
(denied), and writes to two protected paths, `.vscode/settings.json` and `.env`, which the
`default` preset asks about. LangChain has no approval of its own for plain tools, so the asks
go to the engine's approver, a stand-in for a person that says yes to the editor settings and no
to `.env`. Each tool returns a `ToolMessage`: a denial is its content, with status "error",
and the loop goes on. It prints each message, the files on the host, and the audit log's
outcome of each call (the model's tool call ids are the calls' ids). The workspace is a
temporary folder, removed at the end.

Run: python examples/adapter_langchain.py
"""

import asyncio
import json
import tempfile
from pathlib import Path

from langchain_core.language_models.fake_chat_models import GenericFakeChatModel
from langchain_core.messages import AIMessage, BaseMessage, HumanMessage, ToolCall, ToolMessage

from stockade import (
    AuditLog,
    Decision,
    Engine,
    Mount,
    Policy,
    Toolkit,
    VirtualFS,
    add_file_tools,
    read_audit,
)
from stockade import ToolCall as StockadeCall
from stockade.engine.adapters.langchain import stockade_tools

CALLS = [
    ToolCall(name="write_file", args={"path": "notes.md", "content": "# Notes\n"}, id="call_1"),
    ToolCall(name="read_text_file", args={"path": "/workspace/../etc/passwd"}, id="call_2"),
    ToolCall(
        name="write_file", args={"path": ".vscode/settings.json", "content": "{}\n"}, id="call_3"
    ),
    ToolCall(name="write_file", args={"path": ".env", "content": "API_KEY=stolen\n"}, id="call_4"),
]


def approver(call: StockadeCall, decision: Decision) -> bool:
    """Stands in for a person: yes to editor settings, no to anything else."""
    answer = ".vscode/" in json.dumps(call.arguments)
    print(f"  approver asked about {call.id} (rule {decision.rule}): {'yes' if answer else 'no'}")
    return answer


def prepared(folder: Path) -> Path:
    """The workspace in ``folder``: empty but for a ``.env`` the model must not get at."""
    workspace = folder / "workspace"
    workspace.mkdir()
    (workspace / ".env").write_text("API_KEY=kept\n")
    return workspace


async def main() -> None:
    toolkit = Toolkit()
    add_file_tools(toolkit)
    model = GenericFakeChatModel(
        messages=iter(
            [
                AIMessage(content="", tool_calls=CALLS),
                AIMessage(content="Notes written; the key stays as it is."),
            ]
        )
    )
    with tempfile.TemporaryDirectory() as folder:
        workspace = prepared(Path(folder))
        with (
            VirtualFS([Mount("/workspace", workspace)]) as fs,
            AuditLog(Path(folder, "audit.jsonl")) as audit,
        ):
            policy = Policy.preset("default")
            async with Engine(toolkit, policy=policy, fs=fs, audit=audit, approver=approver) as e:
                tools = {tool.name: tool for tool in stockade_tools(e)}
                messages: list[BaseMessage] = [HumanMessage("Write my notes.")]
                print("agent loop:")
                while True:
                    reply = await model.ainvoke(messages)
                    messages.append(reply)
                    if not isinstance(reply, AIMessage) or not reply.tool_calls:
                        break
                    for call in reply.tool_calls:
                        message = await tools[call["name"]].ainvoke(call)
                        assert isinstance(message, ToolMessage)
                        messages.append(message)
                        print(f"  {message.tool_call_id} {message.status}: {message.content}")
                print(f"agent said: {messages[-1].content}")

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
