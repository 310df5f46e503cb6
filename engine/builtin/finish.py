"""The structured finish function: the agent's final answer, validated against a model."""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel

from stockade.engine.content import ToolOutput
from stockade.engine.injection import ToolContext
from stockade.engine.tools import ToolBase


class FinishTool(ToolBase):
    """Validates the final answer against the program's model; the value lands in
    ``result.metadata["response"]`` and ``metadata["finished"]`` is true."""

    def __init__(self, model: type[BaseModel], *, name: str, description: str | None) -> None:
        self.name = name
        self.args_model = model
        self.description = description or (
            "Give your final answer by calling this function; its arguments are the answer."
        )

    def run(self, args: dict[str, Any], ctx: ToolContext) -> ToolOutput:
        assert self.args_model is not None
        answer = self.args_model.model_construct(**args)
        return ToolOutput(
            "Final answer recorded.",
            {"response": answer.model_dump(mode="json"), "finished": True},
        )
