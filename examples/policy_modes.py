"""Policy modes: the same write under a rule whose effect is allow, warn, ask or deny.

Each case builds a one-rule policy (`Policy.from_dict`, shaped like a TOML policy file) and
writes a report through `write_file`. An approver function answers the "ask" cases: it says yes
to the subject "alice" and no to "mallory". For each call it prints the effect, the rule, the
reason, and whether the file really exists afterwards.

Run: python examples/policy_modes.py
"""

import asyncio
import tempfile

from stockade import Decision, Engine, Mount, Policy, ToolCall, Toolkit, VirtualFS, add_file_tools

# (the rule's effect, who calls): "ask" twice, to hear the approver say yes and no
CASES = [("allow", "bot"), ("warn", "bot"), ("ask", "alice"), ("ask", "mallory"), ("deny", "bot")]


def approver(call: ToolCall, decision: Decision) -> bool:
    """Stands in for a person asked to confirm (may also be async)."""
    answer = call.subject == "alice"
    print(f"  approver asked about {call.subject}'s {call.name} ({decision.rule}): {answer}")
    return answer


def policy_for(effect: str) -> Policy:
    rule = {
        "id": f"{effect}-reports",
        "effect": effect,
        "reason": f"writes to reports/ are set to {effect}",
        "actions": ["write"],
        "paths": ["reports/**"],
    }
    return Policy.from_dict({"default": "allow", "rules": [rule]}, source=f"<{effect} example>")


async def main() -> None:
    toolkit = Toolkit()
    add_file_tools(toolkit)
    with tempfile.TemporaryDirectory() as folder, VirtualFS([Mount("/workspace", folder)]) as fs:
        for effect, subject in CASES:
            print(f"rule effect {effect}, called by {subject}:")
            path = f"reports/{effect}-{subject}.md"
            arguments = {"path": path, "content": "# Q3\n"}
            call = ToolCall(name="write_file", arguments=arguments, subject=subject)
            # a policy belongs to its engine: one engine per case, all on the same workspace
            async with Engine(toolkit, policy=policy_for(effect), fs=fs, approver=approver) as e:
                result = await e.call(call)
            decision = result.decision
            assert decision is not None  # every call that reached the policy has one
            print(f"  status {result.status}, effect {decision.effect.value}, rule {decision.rule}")
            print(f"  reason: {decision.reason}")
            print(f"  warnings: {result.metadata.get('warnings', [])}")
            print(f"  {path} written: {fs.exists(path)}")


if __name__ == "__main__":
    asyncio.run(main())
