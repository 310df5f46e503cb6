"""Engines as Ray actors across a cluster (``pip install 'stockade[ray]'``): each session is one
async Ray actor on one worker node, holding a real `Engine` with the built-in tools, the
workspace at /workspace, the policy and the audit log, and the driver sends it calls.

    from stockade.engine.cluster import ClusterSessions, SessionSpec

    sessions = ClusterSessions()                   # after ray.init(address=...)
    session = await sessions.open(SessionSpec(workspace="/srv/w1", policy="default"))
    result = await session.call(call)              # a ToolResult, whatever befalls the node

Nothing here imports Ray until a session is used.
"""

from stockade.engine.cluster._session import ClusterSession
from stockade.engine.cluster._spec import SessionInfo, SessionSpec
from stockade.engine.cluster.sessions import ClusterSessions, UnknownSessionError

__all__ = ["ClusterSession", "ClusterSessions", "SessionInfo", "SessionSpec", "UnknownSessionError"]
