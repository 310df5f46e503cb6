"""One policy for every host: a policy kept on PostgreSQL through casbin's SQLAlchemy adapter.

    store = PolicyStore("postgresql://stockade:...@db.internal/stockade")
    version = store.push(Policy.load("stockade.toml"), note="alice: allow npm test")
    lines, groups, version = store.read()        # what `Policy.from_store` builds a policy from

A policy is stored as its casbin lines (`Policy.casbin_lines`, the role lines, and one line that
carries what lines cannot say: the default, shadow mode and the tables), through the maintained
``sqlalchemy-adapter`` (the one built on ``pycasbin``), in a table of its own. A push replaces
every line in one transaction and a read is one query, so a reader sees the old policy or the
new one, never a mix. Then the push announces itself with casbin's PostgreSQL watcher (NOTIFY on
the store's channel), which every `PolicyFeed` listens to.

Two things differ from the adapter's defaults, each for a reason: the table has eight value
columns of unbounded text (Stockade's lines have eight fields, and a rule's path list can be
long; the adapter's stock table has six of 255 characters and would drop the rest), and lines
are read back in the order they were written (first match depends on it; the adapter's own
``load_policy`` leaves the order to the database).

The ``version`` of a stored policy is the sha256 of its lines as read back: each push has its
own (the settings line says who published it and when).
"""

from __future__ import annotations

import hashlib
import json
import logging
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any, NamedTuple, Protocol

from stockade.errors import ConfigurationError
from stockade.policies.casbin_enforcer import (
    SETTING_KEYS,
    SETTINGS_ID,
    decode_field,
    grouping_lines,
    new_enforcer,
    settings_line,
)
from stockade.policies.policy_file import PolicySpec

if TYPE_CHECKING:
    from sqlalchemy.engine import Engine as SqlEngine

log = logging.getLogger("stockade.policy_store")

TABLE = "stockade_casbin_rule"
CHANNEL = "stockade_policy"  # the watcher's NOTIFY channel
EXTRA = "pip install 'stockade[postgres]'"


class PolicyStoreError(ConfigurationError):
    """The policy store cannot be reached, holds no policy, or holds one that does not load."""


class Publishable(Protocol):
    """What a push needs of a policy (a `Policy`)."""

    spec: PolicySpec

    def casbin_lines(self) -> list[list[str]]: ...


class Stored(NamedTuple):
    """A policy as read from the store."""

    lines: list[list[str]]  # ``p`` lines, in first-match order
    groups: list[list[str]]  # ``g`` lines (role memberships)
    version: str  # sha256 of the lines, hex
    note: str  # who published it and when


def masked(url: str) -> str:
    """``url`` with its password hidden, for every message and log line."""
    try:
        from sqlalchemy.engine import make_url

        parsed = make_url(url)
        if "password" in parsed.query:  # libpq takes one there too
            parsed = parsed.update_query_dict({"password": "***"})
        return parsed.render_as_string(hide_password=True)
    except Exception:  # not a URL at all: say so without echoing it
        return "<a database URL that does not parse>"


def _empty_model() -> Any:
    import casbin

    from stockade.policies.casbin_enforcer import MODEL_TEXT

    return casbin.Enforcer.new_model(text=MODEL_TEXT)


def _rule_class(table: str) -> Any:
    """The adapter's table, with room for Stockade's lines (see the module docstring)."""
    from sqlalchemy import Integer, Text
    from sqlalchemy.orm import DeclarativeBase, mapped_column

    class Base(DeclarativeBase):  # a registry of its own: no table shared with other code
        pass

    columns: dict[str, Any] = {
        "__tablename__": table,
        "id": mapped_column(Integer, primary_key=True),
        "ptype": mapped_column(Text),
        **{f"v{i}": mapped_column(Text, nullable=True) for i in range(8)},
        "__str__": lambda row: ", ".join(
            [row.ptype, *(v for v in (getattr(row, f"v{i}") for i in range(8)) if v is not None)]
        ),
    }
    return type("StockadeCasbinRule", (Base,), columns)


class PolicyStore:
    """The policy on a PostgreSQL database (see the module docstring). Connects lazily and
    creates its table when missing."""

    def __init__(self, url: str, *, table: str = TABLE, channel: str = CHANNEL) -> None:
        self.url = url
        self.where = masked(url)
        self.table = table
        self.channel = channel
        self._adapter: Any = None
        self._engine: SqlEngine | None = None

    def _connect(self) -> Any:
        if self._adapter is not None:
            return self._adapter
        try:
            import sqlalchemy
            from sqlalchemy_adapter import Adapter
        except ImportError as exc:
            raise ConfigurationError(
                f"a policy store needs the PostgreSQL extra: {EXTRA} ({exc})"
            ) from exc

        table = self.table

        class OrderedAdapter(Adapter):  # type: ignore[misc]
            def load_policy(self, model: Any) -> None:
                with self._session_scope() as session:
                    self.load_into(session, model)

            def load_into(self, session: Any, model: Any) -> None:
                from casbin import persist

                for row in session.query(self._db_class).order_by(self._db_class.id):
                    persist.load_policy_line(str(row), model)

            def replace(self, model: Any, read_back: Any) -> None:
                """Every line replaced in one transaction, the lines as stored read back into
                ``read_back`` in it. The table is locked first (reads go on): two pushes at
                once would otherwise each delete only the rows they saw and leave both
                policies' lines behind."""
                with self._session_scope() as session:
                    session.execute(sqlalchemy.text(f"LOCK TABLE {table} IN EXCLUSIVE MODE"))
                    session.query(self._db_class).delete()
                    for ptype, ast in model.model["p"].items():
                        for rule in ast.policy:
                            self._save_policy_line(ptype, rule, session=session)
                    for ptype, ast in model.model["g"].items():
                        for rule in ast.policy:
                            self._save_policy_line(ptype, rule, session=session)
                    session.flush()
                    self.load_into(session, read_back)

        try:
            url = sqlalchemy.engine.make_url(self.url)
            if url.drivername in ("postgresql", "postgres"):  # the driver the watcher uses too
                url = url.set(drivername="postgresql+psycopg2")
            engine = sqlalchemy.create_engine(
                url, pool_pre_ping=True, connect_args={"connect_timeout": 3}
            )
            self._adapter = OrderedAdapter(engine, db_class=_rule_class(self.table))
        except sqlalchemy.exc.ArgumentError as exc:
            raise PolicyStoreError(f"{self.where} is not a database URL: {exc}") from exc
        except sqlalchemy.exc.SQLAlchemyError as exc:
            raise self._unreachable(exc) from exc
        self._engine = engine
        return self._adapter

    def push(self, policy: Publishable, *, note: str = "") -> str:
        """Publish ``policy`` (replacing the one stored) and tell every feed; returns its
        version. ``note`` says who published it and why (stored with it)."""
        settings = policy.spec.model_dump(mode="json", include=set(SETTING_KEYS))
        if settings.get("network") is None:
            settings.pop("network", None)
        stamp = datetime.now(UTC).isoformat(timespec="milliseconds")
        lines = [
            settings_line(settings, f"{stamp} {note}".strip()),
            *policy.casbin_lines(),
        ]
        enforcer = new_enforcer(lines, grouping_lines(policy.spec.roles))
        adapter = self._connect()
        model = _empty_model()
        try:
            adapter.replace(enforcer.get_model(), model)
        except Exception as exc:
            raise self._unreachable(exc) from exc
        stored = self._stored(model)  # as this push left it (another may follow at once)
        self.announce()
        log.info("published policy %s to %s", stored.version[:12], self.where)
        return stored.version

    def announce(self) -> None:
        """NOTIFY the store's channel (casbin's PostgreSQL watcher does the talking)."""
        watcher = self.watcher(listen=False)
        try:
            watcher.update()
        except Exception as exc:
            raise self._unreachable(exc) from exc
        finally:
            watcher.stop()

    def read(self) -> Stored:
        """The stored policy's lines, in one read. Raises `PolicyStoreError` when the store
        cannot be read or holds no policy."""
        adapter = self._connect()
        model = _empty_model()
        try:
            adapter.load_policy(model)
        except Exception as exc:
            raise self._unreachable(exc) from exc
        return self._stored(model)

    def _stored(self, model: Any) -> Stored:
        lines = [list(line) for line in model.model["p"]["p"].policy]
        groups = [list(line) for line in model.model["g"]["g"].policy]
        if not lines:
            raise PolicyStoreError(
                f"the policy store at {self.where} holds no policy yet: publish one with "
                f"`stockade policy push FILE --store URL`"
            )
        odd = next((line for line in lines if len(line) != 8), None)
        odd = odd or next((line for line in groups if len(line) != 2), None)
        if odd is not None:  # written by something else than `push`
            raise PolicyStoreError(
                f"the table {self.table} at {self.where} does not hold a Stockade policy (a "
                f"line of {len(odd)} fields: {', '.join(odd)[:80]}); publish one with "
                "`stockade policy push FILE --store URL`"
            )
        digest = hashlib.sha256(json.dumps([lines, groups]).encode()).hexdigest()
        note = next((decode_field(line[7]) for line in lines if line[6] == SETTINGS_ID), "")
        return Stored(lines, groups, digest, note)

    def watcher(self, *, listen: bool) -> Any:
        """casbin's PostgreSQL watcher on this store's channel (not yet listening)."""
        try:
            from postgresql_watcher import PostgresqlWatcher
            from sqlalchemy.engine import make_url
        except ImportError as exc:
            raise ConfigurationError(
                f"a policy store needs the PostgreSQL extra: {EXTRA} ({exc})"
            ) from exc
        url = make_url(self.url)
        # what libpq takes from the URL's query (a socket folder as host, TLS) reaches the
        # watcher's own connections too, as it reaches the adapter's
        query = {k: v if isinstance(v, str) else v[-1] for k, v in url.query.items()}
        tls = {k: query.get(k) for k in ("sslmode", "sslrootcert", "sslcert", "sslkey")}
        return PostgresqlWatcher(
            host=query.get("host") or url.host or "localhost",
            port=int(query.get("port") or url.port or 5432),
            user=query.get("user") or url.username or "",
            password=url.password or query.get("password") or "",
            dbname=url.database or query.get("dbname") or "postgres",
            channel_name=self.channel,
            start_listening=listen,
            logger=log,
            **tls,
        )

    def close(self) -> None:
        """Release the store's connections."""
        if self._engine is not None:
            self._engine.dispose()

    def _unreachable(self, exc: BaseException) -> PolicyStoreError:
        first = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        return PolicyStoreError(f"the policy store at {self.where} cannot be used: {first}")
