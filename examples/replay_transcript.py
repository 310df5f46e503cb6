"""Replay a transcript: the tool calls of a recorded OpenAI reply, run through the engine.

Writes a small Chat Completions reply (what a model sent back) to a temporary file, reads its
calls with `load_transcript` (the reader behind `stockade run`; Anthropic replies, JSON Lines of
calls and XML tool calls work too), and runs them on an overlay of a temporary project: the
project is untouched until the diff is shown and committed. One call has malformed JSON
arguments and one writes `.env`: each gets its own result, and the other calls still run. Each
result is printed as the `tool` message that would go back to the model.

Run: python examples/replay_transcript.py
"""

import asyncio
import json
import tempfile
from pathlib import Path

from stockade import Engine, Mount, Toolkit, VirtualFS, add_file_tools
from stockade.engine.formats import openai
from stockade.engine.formats.transcripts import load_transcript


def tool_call(call_id: str, name: str, arguments: dict[str, str] | str) -> dict[str, object]:
    """One of an assistant message's tool_calls; a model sends the arguments as JSON text."""
    text = arguments if isinstance(arguments, str) else json.dumps(arguments)
    return {"id": call_id, "type": "function", "function": {"name": name, "arguments": text}}


REPLY = {
    "choices": [{"message": {"role": "assistant", "content": None, "tool_calls": [
        tool_call("call_1", "read_text_file", {"path": "app.py"}),
        tool_call("call_2", "edit_file", {"path": "app.py", "old_text": "hello", "new_text": "hi"}),
        tool_call("call_3", "write_file", '{"path": "notes.md", "content": '),  # cut off
        tool_call("call_4", "write_file", {"path": ".env", "content": "TOKEN=x"}),
    ]}}]
}  # fmt: skip


def prepare(folder: Path) -> tuple[Path, Path]:
    """A one-file project and the recorded reply, side by side in ``folder``."""
    project, transcript = folder / "project", folder / "reply.json"
    project.mkdir()
    (project / "app.py").write_text('print("hello")\n')
    transcript.write_text(json.dumps(REPLY))
    return project, transcript


async def main() -> None:
    toolkit = Toolkit()
    add_file_tools(toolkit)
    with tempfile.TemporaryDirectory() as folder:
        project, transcript = prepare(Path(folder))
        calls = load_transcript(transcript, toolkit=toolkit)
        print(f"{len(calls)} calls in {transcript.name}")
        with VirtualFS([Mount("/workspace", project, overlay=True)]) as fs:
            async with Engine(toolkit, fs=fs) as engine:
                for call in calls:
                    result = await engine.call(call)
                    print(f"{call.name}: {result.status}\n  {openai.render_result(result)}")
            for change in fs.changes():
                print(f"staged {change.kind} {change.path}:\n{change.diff}")
            print(f"before commit, app.py on disk: {(project / 'app.py').read_text()!r}")
            fs.commit()
        print(f"after commit, app.py on disk: {(project / 'app.py').read_text()!r}")


if __name__ == "__main__":
    asyncio.run(main())
