"""``stockade audit verify --store`` and ``stockade audit show --store`` as a user runs them:
exit codes, text, --json, the --host/--writer filters, the URL from the environment, and a
password that is never printed."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from audit_store_support import sql
from support import one_error_line, stockade_cli

from stockade.engine.observe import AuditStore


@pytest.fixture
def two_hosts(postgres_url: str, tmp_path: Path) -> list[str]:
    """Two writers, on hosts web1 and web2, each of 3 calls' worth of records."""
    writers = []
    for host in ("web1", "web2"):
        with AuditStore(postgres_url, folder=tmp_path / host, host=host) as audit:
            for n in range(3):
                audit.record("intent", {"tool": f"tool_{host}", "call_id": f"{host}-{n}"})
                audit.record("outcome", {"tool": f"tool_{host}", "status": "ok",
                                         "call_id": f"{host}-{n}"})  # fmt: skip
            writers.append(audit.writer)
    return writers


def test_verify_store_says_intact_per_writer(
    postgres_url: str, tmp_path: Path, two_hosts: list[str]
) -> None:
    done = stockade_cli("audit", "verify", "--store", postgres_url, cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    assert "audit store intact: 12 records of 2 writer(s)" in done.stdout
    for writer in two_hosts:
        assert f"{writer}: intact, 6 records" in done.stdout
    assert "stockade-test" not in done.stdout + done.stderr
    assert "stockade:***@" in done.stdout


def test_verify_store_exits_1_naming_the_bad_writer_and_speaks_json(
    postgres_url: str, tmp_path: Path, two_hosts: list[str]
) -> None:
    sql(postgres_url, "DELETE FROM stockade_audit WHERE writer = %s AND seq = 6", two_hosts[1])
    done = stockade_cli("audit", "verify", "--store", postgres_url, cwd=tmp_path)
    assert done.returncode == 1
    assert f"{two_hosts[1]}: NOT intact, 5 records; record 6 is missing" in done.stdout
    as_json = stockade_cli("audit", "verify", "--json", cwd=tmp_path,
                           env={"STOCKADE_AUDIT_STORE": postgres_url})  # fmt: skip
    assert as_json.returncode == 1
    report = json.loads(as_json.stdout)
    assert report["ok"] is False
    assert "stockade-test" not in as_json.stdout
    assert [w["ok"] for w in report["writers"]] == [True, False]
    assert report["writers"][1]["bad_record"] == 6
    one = stockade_cli("audit", "verify", "--store", postgres_url, "--host", "web1", cwd=tmp_path)
    assert one.returncode == 0
    assert two_hosts[1] not in one.stdout


def test_show_store_filters_across_writers(
    postgres_url: str, tmp_path: Path, two_hosts: list[str]
) -> None:
    done = stockade_cli("audit", "show", "--store", postgres_url, "--host", "web2",
                        "--kind", "outcome", "--json", cwd=tmp_path)  # fmt: skip
    assert done.returncode == 0, done.stderr
    records = [json.loads(line) for line in done.stdout.splitlines()]
    assert [(r["writer"], r["call_id"]) for r in records] == [
        (two_hosts[1], f"web2-{n}") for n in range(3)
    ]
    table = stockade_cli("audit", "show", "--store", postgres_url, "--tool", "tool_web1",
                         "-n", "2", cwd=tmp_path)  # fmt: skip
    assert table.returncode == 0
    assert table.stdout.count(two_hosts[0]) == 2
    assert two_hosts[1] not in table.stdout
    alone = stockade_cli("audit", "show", "--store", postgres_url, "--writer", two_hosts[0],
                         "--json", cwd=tmp_path)  # fmt: skip
    assert len(alone.stdout.splitlines()) == 6


def test_store_usage_errors_and_unreachable_store_mask_the_password(tmp_path: Path) -> None:
    log = tmp_path / "audit.jsonl"
    both = stockade_cli("audit", "verify", str(log), "--store", "postgresql://u:pw@h/d",
                        cwd=tmp_path)  # fmt: skip
    assert both.returncode == 2
    assert "either a LOG or --store" in one_error_line(both.stderr)
    wrong = stockade_cli("audit", "show", "--store", "mysql://u:hunter22@h/d", cwd=tmp_path)
    assert wrong.returncode == 2
    assert "hunter22" not in wrong.stderr
    dead = "postgresql://stockade:hunter22@127.0.0.1:9/stockade"
    down = stockade_cli("audit", "show", "--store", dead, cwd=tmp_path)
    assert down.returncode == 1
    assert "cannot reach the audit store" in one_error_line(down.stderr)
    assert "hunter22" not in down.stderr + down.stdout
    verdict = stockade_cli("audit", "verify", "--store", dead, cwd=tmp_path)
    assert verdict.returncode == 1
    assert "hunter22" not in verdict.stdout + verdict.stderr
    host_alone = stockade_cli("audit", "verify", str(log), "--host", "x", cwd=tmp_path)
    assert host_alone.returncode == 2


def test_the_file_log_is_read_as_before_when_a_log_is_named(tmp_path: Path) -> None:
    from stockade.engine.observe import AuditLog

    with AuditLog(tmp_path / "audit.jsonl") as log:
        log.record("intent", {"tool": "echo"})
    env = {"STOCKADE_AUDIT_STORE": "postgresql://u:pw@127.0.0.1:9/d"}
    done = stockade_cli("audit", "verify", "audit.jsonl", cwd=tmp_path, env=env)
    assert done.returncode == 0
    assert "audit log intact: 1 records" in done.stdout
    helped = stockade_cli("audit", "verify", "--help", cwd=tmp_path, env=env)
    assert "STOCKADE_AUDIT_STORE" in helped.stdout
    assert "pw@" not in helped.stdout
