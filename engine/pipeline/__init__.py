"""One call, end to end: the `Engine` and its steps (validate, classify, decide, schedule, run,
result), and `CallContext`, every call an engine received and its result.

Only the names below are public; the step modules (``_validate`` ...) are the engine's own.
"""

from stockade.engine.pipeline._state import Approve, Approver
from stockade.engine.pipeline.engine import Engine
from stockade.engine.pipeline.history import CallContext

__all__ = ["Approve", "Approver", "CallContext", "Engine"]
