"""Step 4, decide: the policy's decision, made stricter by the tool's own permission hook, and
an "ask" decision put to the approver.

Every rule of the policy lives in the policy: what an ask nobody can answer becomes, what an
answer makes of it, shadow mode. This step only gathers the answers.
"""

from __future__ import annotations

import logging
from typing import Any

from stockade.engine.injection import ToolContext
from stockade.engine.messages import printable
from stockade.engine.pipeline._approval import put
from stockade.engine.pipeline._lasting import Kept, Lasting
from stockade.engine.pipeline._state import Admitted
from stockade.engine.tools import RegisteredTool
from stockade.policies import Decision, Effect, Policy, Request, strictest

log = logging.getLogger("stockade.engine")


def decide(
    policy: Policy,
    tool: RegisteredTool,
    request: Request,
    kwargs: dict[str, Any],
    ctx: ToolContext | None,
) -> Decision:
    """The policy decides; the tool's own permission hook can only make the decision
    stricter. A hook that fails denies: a permission check never fails open."""
    decision = policy.decide(request)
    check = tool.permission_check
    if check is None or ctx is None:
        return decision
    rule = f"{tool.name}.check_permissions"
    try:
        verdict = check(kwargs, ctx)
    except BaseException as exc:  # the tool's own code: whatever it raises denies
        return Decision(
            Effect.DENY,
            rule,
            f"the permission check failed ({type(exc).__name__}: {printable(exc)}), so the "
            "call is denied",
        )
    if verdict is not None and not isinstance(verdict, Decision):
        return Decision(
            Effect.DENY,
            rule,
            f"the permission check returned {type(verdict).__name__}, not a Decision",
        )
    if verdict is not None and verdict.effect is Effect.ASK and decision.effect is Effect.ASK:
        # both ask, and one yes would answer both: the question names both
        return decision.with_asks((verdict,))
    return strictest(decision, verdict)


async def ask(admitted: Admitted, policy: Policy, lasting: Lasting) -> None:
    """Put an "ask" decision to the call's approver; its answer becomes the call's decision
    (and ``approval`` note); one that does not answer within the approval timeout refuses
    (`_approval`). An ask the engine's lasting approvals cover is allowed without asking; one
    answered "session" or "always" adds the chosen suggestion to them (`_lasting`). Without
    an approver the policy says what an unanswered ask becomes."""
    asked, approver, request = admitted.decision, admitted.approver, admitted.request
    covered = lasting.approve(request, asked)
    if covered is not None:
        admitted.decision = covered
        notes = admitted.note()
        notes.approval, notes.approval_scope = "approved", lasting.scope_of(covered)
        return
    if approver is None:
        admitted.decision = policy.unanswered(asked)
        # nobody could say yes: a refusal, or in shadow mode a call that runs unasked (either
        # way the outcome record says what became of the ask)
        denied = admitted.decision.effect is Effect.DENY
        admitted.note().approval = "refused" if denied else "unanswered"
        return
    question = lasting.question(request, asked)
    answer = await put(approver, admitted.call, question, admitted.approval_timeout)
    if answer.warning is not None:
        admitted.warn(answer.warning)
    approved = answer.approved
    verdict = answer.verdict or (
        "approved by the approver" if approved else "refused by the approver"
    )
    scope: Kept = "once"
    if approved and answer.scope in ("session", "always"):
        scope, warning = lasting.keep(admitted.call, question, answer)
        if warning is not None:
            admitted.warn(warning)
        if scope != "once":
            verdict += f" ({scope})"
    admitted.decision = asked.answered(approved, verdict)
    notes = admitted.note()
    notes.approval = "approved" if approved else "refused"
    if approved:
        notes.approval_scope = scope


def warned(admitted: Admitted) -> None:
    """A warn decision: the call runs, and its result, audit record and log say why."""
    reason = admitted.decision.reason
    admitted.warn(reason)
    log.warning(
        "tool %s (call %s) runs with a warning: %s", admitted.tool.name, admitted.call.id, reason
    )
