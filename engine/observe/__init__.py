"""What is recorded of calls: the hash-chained audit log (written, verified, read), OpenTelemetry
spans, and the observers through which the engine feeds them.

`tracer_provider` and `memory_provider` live in ``stockade.engine.observe.tracing``, which loads
the OpenTelemetry SDK: import it when you trace.
"""

from stockade.engine.observe.audit_log import AuditError, AuditLog
from stockade.engine.observe.audit_read import AuditReport, read_audit, verify_audit
from stockade.engine.observe.observer import CallObserver

__all__ = ["AuditError", "AuditLog", "AuditReport", "CallObserver", "read_audit", "verify_audit"]
