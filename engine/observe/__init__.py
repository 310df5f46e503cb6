"""What is recorded of calls: the hash-chained audit log (written, verified, read), the audit
store that ships it to PostgreSQL, OpenTelemetry spans, and the observers through which the
engine feeds them.

`tracer_provider` and `memory_provider` live in ``stockade.engine.observe.tracing``, which loads
the OpenTelemetry SDK: import it when you trace.
"""

from stockade.engine.observe.audit_log import AuditError, AuditLog
from stockade.engine.observe.audit_read import AuditReport, read_audit, verify_audit
from stockade.engine.observe.audit_store import AuditStore
from stockade.engine.observe.observer import CallObserver
from stockade.engine.observe.store_read import StoreReport, read_store, verify_store

__all__ = [
    "AuditError",
    "AuditLog",
    "AuditReport",
    "AuditStore",
    "CallObserver",
    "StoreReport",
    "read_audit",
    "read_store",
    "verify_audit",
    "verify_store",
]
