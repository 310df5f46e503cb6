"""The format parsers take the SDKs' own objects, as a program holds them.

A new user passed ``response.choices[0].message`` (a ``ChatCompletionMessage``), a Responses
API ``ResponseFunctionToolCall`` and an Anthropic ``Message`` straight to the parsers and got
``FormatError ... got ChatCompletionMessage``; ``.model_dump()`` first worked. The objects here
are built with the real SDKs' classes (no network): the same calls come out as from their
dicts.
"""

from __future__ import annotations

import anthropic.types as anthropic_types
import openai.types.chat as chat
import openai.types.responses as responses
import pytest

from stockade.engine import FormatError
from stockade.engine.formats import anthropic as anthropic_format
from stockade.engine.formats import openai as openai_format


def chat_message() -> chat.ChatCompletionMessage:
    return chat.ChatCompletionMessage(
        role="assistant",
        content=None,
        tool_calls=[
            chat.ChatCompletionMessageFunctionToolCall(
                id="call_1",
                type="function",
                function={"name": "read_text_file", "arguments": '{"path": "notes.txt"}'},
            )
        ],
    )


def test_a_chat_completions_message_object_gives_its_calls() -> None:
    message = chat_message()
    (call,) = openai_format.parse_tool_calls(message)
    assert (call.id, call.name, call.arguments) == (
        "call_1",
        "read_text_file",
        '{"path": "notes.txt"}',
    )
    assert openai_format.parse_tool_calls(message) == openai_format.parse_tool_calls(
        message.model_dump()
    )


def test_a_whole_chat_completion_and_a_list_of_call_objects_give_their_calls() -> None:
    completion = chat.ChatCompletion(
        id="c1",
        object="chat.completion",
        created=0,
        model="m",
        choices=[{"index": 0, "finish_reason": "tool_calls", "message": chat_message()}],
    )
    assert [c.name for c in openai_format.parse_tool_calls(completion)] == ["read_text_file"]
    listed = chat_message().tool_calls or []
    assert [c.id for c in openai_format.parse_tool_calls(listed)] == ["call_1"]


def test_a_responses_function_call_object_gives_its_call() -> None:
    item = responses.ResponseFunctionToolCall(
        type="function_call", call_id="fc_1", name="grep", arguments='{"pattern": "TODO"}'
    )
    (call,) = openai_format.parse_tool_calls(item)
    assert (call.id, call.name) == ("fc_1", "grep")
    (from_list,) = openai_format.parse_tool_calls([item])
    assert from_list == call


def test_an_anthropic_message_object_gives_its_calls() -> None:
    message = anthropic_types.Message(
        id="msg_1",
        type="message",
        role="assistant",
        model="m",
        content=[
            anthropic_types.TextBlock(type="text", text="Let me look."),
            anthropic_types.ToolUseBlock(
                type="tool_use", id="tu_1", name="list_directory", input={"path": "."}
            ),
        ],
        stop_reason="tool_use",
        usage={"input_tokens": 1, "output_tokens": 1},
    )
    (call,) = anthropic_format.parse_tool_calls(message)
    assert (call.id, call.name, call.arguments) == ("tu_1", "list_directory", {"path": "."})
    assert anthropic_format.parse_tool_calls(message.content) == [call]


def test_an_object_that_is_not_a_message_is_still_refused_saying_what_it_is() -> None:
    class Broken:
        def model_dump(self, **_: object) -> object:
            raise RuntimeError("no")

    with pytest.raises(FormatError, match="Broken could not be read as data"):
        openai_format.parse_tool_calls(Broken())
    with pytest.raises(FormatError, match="got int"):
        anthropic_format.parse_tool_calls(5)
