"""Tool-call formats: reading model output into `ToolCall`s and writing `ToolResult`s back.

One module per wire format (``openai``, ``anthropic``, ``xml``), plus ``schemas`` for the tool
definitions each API expects.
"""
