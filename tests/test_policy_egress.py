"""Network egress by name, the policy side: the ``[network]`` table as a file gives it (good and
bad patterns, each refusal naming the pattern and what to write instead), `EgressRules.decide`
on every pattern form, the lint findings with their lines, how ``[process] network`` and the
table go together, and properties over arbitrary hosts and ports (the host comes from a
command: nothing it sends may raise, and nothing that is not a host is allowed).

Every policy here is a real `Policy`, from a file in tmp_path, a dict or a preset.
"""

from __future__ import annotations

import tomllib
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from stockade.policies import PRESETS, Effect, Policy, PolicyError, Request, lint_text
from stockade.policies.egress import EgressRules, normalise
from stockade.policies.host_patterns import parse_pattern
from stockade.policies.policy_file import NetworkSpec


def write_policy(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "policy.toml"
    path.write_text(text, encoding="utf-8")
    return path


def rules(*allow: str, deny: tuple[str, ...] = (), **more: Any) -> EgressRules:
    spec = NetworkSpec.model_validate({"allow": list(allow), "deny": list(deny), **more})
    return EgressRules.from_spec(spec)


def problem_of(text: str, tmp_path: Path) -> tuple[int | None, str, str]:
    with pytest.raises(PolicyError) as caught:
        Policy.load(write_policy(tmp_path, text))
    (problem,) = caught.value.problems
    return problem.line, problem.key, problem.message


# -- 1. loading ---------------------------------------------------------------------------------


GOOD_PATTERNS = [
    "pypi.org",
    "PyPI.org.",
    "*.pythonhosted.org",
    "*.a.b.example.com:8443",
    "bücher.example",
    "*.Bücher.example",
    "xn--bcher-kva.example",
    "10.0.0.5",
    "10.0.0.5:5432",
    "[::1]",
    "[::1]:8080",
    "::1",
    "fd00::5",
    "localhost:*",
    "*",
    "*:*",
    "*:8080",
]


@pytest.mark.parametrize("pattern", GOOD_PATTERNS)
def test_good_patterns_load(pattern: str, tmp_path: Path) -> None:
    policy = Policy.load(write_policy(tmp_path, f'version = 1\n[network]\nallow = ["{pattern}"]\n'))
    assert policy.spec.network is not None
    assert policy.spec.network.allow == [pattern]  # kept as written
    assert policy.egress is not None
    assert policy.network_mode == "filtered"


# (pattern, what the message must say besides the pattern itself)
BAD_PATTERNS = [
    ("https://pypi.org/simple", ["is a URL", "give the host alone, e.g. pypi.org"]),
    ("http://Mirror.test:8080/x", ["is a URL", "e.g. mirror.test:8080"]),
    ("pypi.org/simple", ["has a path", "give the host alone, e.g. pypi.org"]),
    ("", ["empty pattern", "give a host such as pypi.org"]),
    (" pypi.org", ["spaces around it", "write 'pypi.org'"]),
    ("pypi.org files.pythonhosted.org", ["has a space", '["pypi.org", "files.pythonhosted.org"]']),
    ("py*.org", ["not a whole first label", "*.example.com"]),
    ("a.*.org", ["not a whole first label"]),
    ("**.x.org", ["not a whole first label"]),
    ("*.", ["after '*.'"]),
    ("*.10.0.0.5", ["before an address", "write '10.0.0.5'"]),
    ("*.a_b.org", ["after '*.'", "letters, digits and hyphens"]),
    ("pypi.org:0", ["port '0'", "from 1 to 65535, or * for any port"]),
    ("pypi.org:65536", ["port '65536'", "from 1 to 65535"]),
    ("pypi.org:http", ["port 'http'", "from 1 to 65535"]),
    ("pypi.org:", ["port ''", "from 1 to 65535"]),
    ("pypi.org:١", ["from 1 to 65535"]),  # an Arabic-Indic digit is no port number
    ("a_b.org", ["not a host name or IP address", "letters, digits and hyphens"]),
    ("-a.org", ["not a host name or IP address"]),
    ("a..org", ["not a host name or IP address"]),
    ("user@pypi.org", ["not a host name or IP address"]),
    ("bad\\u0000.org", ["not a host name or IP address"]),
    ("x" * 64 + ".org", ["not a host name or IP address"]),
    ("127.1", ["not an IP address written in full", "e.g. 127.0.0.1"]),
    ("2130706433", ["not an IP address written in full"]),
    ("0x7f.0.0.1", ["not an IP address written in full"]),
    ("010.0.0.1", ["not an IP address written in full"]),
    ("::1:443:x", ["in brackets, e.g. [::1]:8080"]),
    ("[10.0.0.5]", ["not a host name or IP address"]),
    ("[::1]443", ["after the address"]),
    ("fe80::1%eth0", ["IPv6"]),
]


@pytest.mark.parametrize(("pattern", "says"), BAD_PATTERNS)
def test_bad_patterns_are_refused_naming_the_pattern_and_the_fix(
    pattern: str, says: list[str], tmp_path: Path
) -> None:
    text = f'version = 1\n[network]\nallow = ["pypi.org", "{pattern}"]\n'
    line, key, message = problem_of(text, tmp_path)
    assert (line, key) == (3, "network.allow.1")
    shown = tomllib.loads(text)["network"]["allow"][1]
    assert repr(shown) in message or not shown
    for part in says:
        assert part in message
    assert "Value error" not in message


def test_a_bad_pattern_in_a_list_over_many_lines_names_its_own_line(tmp_path: Path) -> None:
    text = (
        "version = 1\n"
        "[network]\n"
        "deny = [\n"
        '  "evil.test",  # a comment, with "quotes"\n'
        '  \'a"b.test\', "x.test",\n'
        '  "https://bad.test/",\n'
        "]\n"
    )
    with pytest.raises(PolicyError) as caught:
        Policy.load(write_policy(tmp_path, text))
    found = [(p.line, p.key) for p in caught.value.problems]
    assert found == [(5, "network.deny.1"), (6, "network.deny.3")]


@pytest.mark.parametrize(
    ("table", "key", "says"),
    [
        ('reach_private = ["10.0.0.0/33"]', "network.reach_private.0", "give a CIDR such as"),
        ('reach_private = ["localhost"]', "network.reach_private.0", "10.0.0.0/8"),
        ('unlisted = "allow"', "network.unlisted", "'deny' or 'ask'"),
        ("alow = []", "network.alow", "unknown key"),
        ('[network.hosts]\n"db.test" = "nope"', "network.hosts.db.test", "not an IP address"),
        ('[network.hosts]\n"db.test" = "fe80::1%eth0"', "network.hosts.db.test", "interface"),
        ('[network.hosts]\n"a b" = "10.0.0.5"', "network.hosts.a b", "not a host name"),
        ('[network.hosts]\n"*.x.test" = "10.0.0.5"', "network.hosts.*.x.test", "not a host"),
        ('[network.hosts]\n"10.0.0.6" = "10.0.0.5"', "network.hosts.10.0.0.6", "an address"),
        ('[network.hosts]\ndb.test = "10.0.0.5"', "network.hosts.db", "quote a name with dots"),
        (
            '[network.hosts]\n"DB.test" = "10.0.0.5"\n"db.test." = "10.0.0.6"',
            "network.hosts",
            "'DB.test' and 'db.test.' are the same name",
        ),
    ],
)
def test_bad_network_tables_are_refused(table: str, key: str, says: str, tmp_path: Path) -> None:
    text = f'version = 1\n[network]\nallow = ["pypi.org"]\n{table}\n'
    line, found_key, message = problem_of(text, tmp_path)
    assert found_key == key
    assert says in message
    assert line is not None
    assert line >= 4


def test_network_false_written_with_a_network_table_is_a_contradiction(tmp_path: Path) -> None:
    text = 'version = 1\n[process]\nnetwork = false\n[network]\nallow = ["pypi.org"]\n'
    line, key, message = problem_of(text, tmp_path)
    assert (line, key) == (3, "process.network")
    assert "network = false" in message
    assert "remove network = false" in message
    with pytest.raises(PolicyError, match=r"process\.network"):
        Policy.from_dict({"process": {"network": False}, "network": {}})


def test_the_three_network_modes() -> None:
    none = Policy.from_dict({})
    assert (none.network_mode, none.egress, none.process.network) == ("none", None, False)
    opened = Policy.from_dict({"process": {"network": True}})
    assert (opened.network_mode, opened.egress, opened.process.network) == ("open", None, True)
    # the table alone gives commands a filtered network; process.network (what a command tool
    # that takes no egress passes on) stays off, so no such tool opens every host
    filtered = Policy.from_dict({"network": {"allow": ["pypi.org"]}})
    assert filtered.network_mode == "filtered"
    assert filtered.process.network is False
    assert isinstance(filtered.egress, EgressRules)
    assert filtered.egress is filtered.egress  # built once
    both = Policy.from_dict({"process": {"network": True, "timeout_s": 5}, "network": {}})
    assert both.network_mode == "filtered"
    assert both.process.timeout_s == 5
    assert both.process.network is False


@pytest.mark.parametrize("name", PRESETS)
def test_no_preset_has_a_network_table(name: str) -> None:
    policy = Policy.preset(name)
    assert policy.egress is None
    assert policy.network_mode == "none"


def test_from_enforcer_takes_the_network_table() -> None:
    policy = Policy.from_dict({"network": {"allow": ["pypi.org"], "unlisted": "ask"}})
    enforcer = policy.casbin().enforcer
    assert policy.spec.network is not None
    loaded = Policy.from_enforcer(enforcer, network=policy.spec.network.model_dump())
    assert loaded.network_mode == "filtered"
    assert loaded.spec.network == policy.spec.network
    assert Policy.from_enforcer(enforcer).network_mode == "none"


# -- 2. deciding --------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("host", "port", "effect", "rule"),
    [
        ("pypi.org", 443, Effect.ALLOW, "network.allow[0]"),
        ("pypi.org", 80, Effect.ALLOW, "network.allow[0]"),
        ("pypi.org", 8080, Effect.DENY, "network.unlisted"),  # no port: 80 and 443 only
        ("PyPI.ORG.", 443, Effect.ALLOW, "network.allow[0]"),  # case, one trailing dot
        ("pypi.org..", 443, Effect.DENY, "network.invalid"),
        ("www.pypi.org", 443, Effect.DENY, "network.unlisted"),
        ("files.pythonhosted.org", 443, Effect.ALLOW, "network.allow[1]"),
        ("a.b.c.pythonhosted.org", 80, Effect.ALLOW, "network.allow[1]"),  # any depth
        ("pythonhosted.org", 443, Effect.DENY, "network.unlisted"),  # not the domain itself
        ("evilpythonhosted.org", 443, Effect.DENY, "network.unlisted"),  # a label boundary
        ("pythonhosted.org.evil.test", 443, Effect.DENY, "network.unlisted"),
        ("api.test", 8443, Effect.ALLOW, "network.allow[2]"),
        ("api.test", 443, Effect.DENY, "network.unlisted"),  # a port given: that port alone
        ("db.internal", 5432, Effect.ALLOW, "network.allow[3]"),  # :* any port
        ("db.internal", 1, Effect.ALLOW, "network.allow[3]"),
        ("10.0.0.5", 22, Effect.ALLOW, "network.allow[4]"),
        ("10.0.0.6", 22, Effect.DENY, "network.unlisted"),
        ("::1", 8080, Effect.ALLOW, "network.allow[5]"),
        ("[::1]", 8080, Effect.ALLOW, "network.allow[5]"),
        ("0:0:0::1", 8080, Effect.ALLOW, "network.allow[5]"),
        ("::1", 443, Effect.DENY, "network.unlisted"),
        ("::ffff:10.0.0.5", 22, Effect.DENY, "network.unlisted"),  # not the IPv4 address
        ("x.bücher.example", 443, Effect.ALLOW, "network.allow[6]"),
        ("X.BÜCHER.example", 443, Effect.ALLOW, "network.allow[6]"),
        ("x.xn--bcher-kva.example", 443, Effect.ALLOW, "network.allow[6]"),
        ("ｐｙｐｉ.org", 443, Effect.ALLOW, "network.allow[0]"),  # full-width, mapped by IDNA
        ("bad.pythonhosted.org", 443, Effect.DENY, "network.deny[0]"),  # deny wins
        ("x.bad.pythonhosted.org", 443, Effect.DENY, "network.deny[1]"),
        ("evil.test", 443, Effect.DENY, "network.unlisted"),
        ("127.1", 443, Effect.DENY, "network.invalid"),
        ("a_b.test", 443, Effect.DENY, "network.invalid"),
        ("pypi.org", 0, Effect.DENY, "network.invalid"),
        ("pypi.org", 65536, Effect.DENY, "network.invalid"),
    ],
)
def test_decide(host: str, port: int, effect: Effect, rule: str) -> None:
    egress = rules(
        "pypi.org",
        "*.pythonhosted.org",
        "api.test:8443",
        "db.internal:*",
        "10.0.0.5:*",
        "[::1]:8080",
        "*.Bücher.example",
        deny=("bad.pythonhosted.org", "*.bad.pythonhosted.org"),
    )
    decision = egress.decide(host, port)
    assert (decision.effect, decision.rule) == (effect, rule)
    assert decision.action == "connect"
    assert decision.target is not None
    assert decision.target.isascii()


def test_decisions_name_the_host_port_and_pattern() -> None:
    egress = rules("pypi.org", "api.test:8443", deny=("*.evil.test",))
    allowed = egress.decide("PyPI.org", 443)
    assert allowed.target == "pypi.org:443"
    assert allowed.reason == "pypi.org:443 is allowed by [network] allow 'pypi.org'"
    denied = egress.decide("a.evil.test", 443)
    assert denied.reason == "a.evil.test:443 is denied by [network] deny '*.evil.test'"
    unlisted = egress.decide("evil.test", 443)
    assert unlisted.reason == "evil.test:443 is not in [network] allow"
    other_port = egress.decide("api.test", 443)
    assert "name other ports" in other_port.reason
    assert egress.decide("::1", 443).target == "[::1]:443"
    bad = egress.decide("a\x00b\ud800", 443)
    assert bad.effect is Effect.DENY
    assert "not a host name or an IP address" in bad.reason
    assert bad.target == "a\\x00b\\ud800:443"
    assert bad.reason.encode("utf-8")  # a reason from a hostile host still goes in a log


def test_the_first_matching_pattern_names_the_decision() -> None:
    egress = rules("*.test", "a.test", "*:*", "b.a.test")
    assert egress.decide("b.a.test", 443).rule == "network.allow[0]"
    assert egress.decide("b.a.test", 22).rule == "network.allow[2]"
    assert egress.decide("10.9.9.9", 22).rule == "network.allow[2]"  # "*" names addresses too


def test_unlisted_ask() -> None:
    egress = rules("pypi.org", deny=("evil.test",), unlisted="ask")
    asked = egress.decide("other.test", 443)
    assert (asked.effect, asked.rule) == (Effect.ASK, "network.unlisted")
    assert "needs approval" in asked.reason
    assert egress.decide("evil.test", 443).effect is Effect.DENY  # a deny is never asked about
    assert egress.decide("bad host", 443).effect is Effect.DENY  # nor what is no host


def test_every_host_is_not_every_spelling_of_an_address() -> None:
    egress = rules("*:*")
    assert egress.decide("example.test", 9).effect is Effect.ALLOW
    for spelling in ("2130706433", "0x7f000001", "127.1", "017700000001", "0x7f.0.0.1"):
        assert egress.decide(spelling, 80).rule == "network.invalid", spelling


def test_the_compiled_table() -> None:
    egress = rules(
        "pypi.org",
        "api.test:8443",
        "*:9000",
        "db.test:*",
        deny=("x.test:7000",),
        hosts={"DB.Test.": "127.0.0.1", "bücher.test": "0:0::1"},
        reach_private=["127.0.0.1", "10.1.2.3/8", "FD00::/8"],
    )
    assert egress.ports == frozenset({80, 443, 8443, 9000})  # allow's own ports, not deny's
    assert dict(egress.hosts) == {"db.test": "127.0.0.1", "xn--bcher-kva.test": "::1"}
    assert egress.reach_private == ("127.0.0.1/32", "10.0.0.0/8", "fd00::/8")
    assert egress.unlisted is Effect.DENY
    with pytest.raises(TypeError):
        egress.hosts["x"] = "1.2.3.4"  # type: ignore[index]


# -- 3. lint ------------------------------------------------------------------------------------

LINTED = """version = 1
[process]
require_isolation = true

[network]
allow = [
  "*",
  "*.com",
  "*.co.uk",
  "*.github.io",
  "*.example.com",
  "pypi.org",
  "a.example.org",
]
deny = ["pypi.org", "*.example.org", "x.example.com:22"]
reach_private = ["127.0.0.1/32", "10.0.0.0/8", "0.0.0.0/0", "::/0", "127.0.0.0/8"]

[network.hosts]
"db.test" = "127.0.0.1"
"""


def test_lint_network_findings_with_their_lines() -> None:
    found = [(f.severity, f.line, f.key) for f in lint_text(LINTED)]
    assert found == [
        ("error", 7, "network.allow.0"),  # "*": every host
        ("warning", 8, "network.allow.1"),  # a top-level domain
        ("warning", 9, "network.allow.2"),  # a public suffix
        ("warning", 10, "network.allow.3"),  # a hosting suffix
        ("warning", 12, "network.allow.5"),  # in deny too
        ("warning", 13, "network.allow.6"),  # a deny pattern covers it
        ("warning", 16, "network.reach_private.2"),
        ("warning", 16, "network.reach_private.3"),
        ("warning", 16, "network.reach_private.4"),
        ("info", 3, "process.require_isolation"),
        ("info", 15, "network.deny.2"),  # no allow pattern names port 22
    ]
    messages = {f.key: f.message for f in lint_text(LINTED)}
    assert "allows every host" in messages["network.allow.0"]
    assert "a whole top-level domain" in messages["network.allow.1"]
    assert "e.g. *.example.co.uk" in messages["network.allow.2"]
    assert "deny wins, so this allow entry never applies" in messages["network.allow.5"]
    assert "deny '*.example.org' (deny[1])" in messages["network.allow.6"]
    assert "every local service of this machine" in messages["network.reach_private.2"]


def test_lint_deny_and_hosts_that_change_nothing() -> None:
    text = (
        "version = 1\n"
        "[process]\n"
        "require_isolation = true\n"
        "[network]\n"
        'allow = ["pypi.org", "*.corp.test:*"]\n'
        'deny = ["evil.test", "bad.corp.test"]\n'
        "[network.hosts]\n"
        '"db.test" = "127.0.0.1"\n'
        '"git.corp.test" = "10.0.0.7"\n'
    )
    found = [(f.severity, f.line, f.key) for f in lint_text(text)]
    assert found == [
        ("warning", 8, "network.hosts.db.test"),
        ("info", 3, "process.require_isolation"),
        ("info", 6, "network.deny.0"),
    ]
    messages = {f.key: f.message for f in lint_text(text)}
    assert "the mapping is never used;" in messages["network.hosts.db.test"]
    assert "unlisted hosts are denied anyway" in messages["network.deny.0"]
    # with unlisted = "ask", a deny entry matters and a mapping may be used once approved
    asked = text.replace("[network]\n", '[network]\nunlisted = "ask"\n')
    findings = {f.key: f for f in lint_text(asked)}
    assert "network.deny.0" not in findings
    assert "unless someone approves" in findings["network.hosts.db.test"].message


def test_lint_an_open_network_and_a_filtered_one() -> None:
    opened = "version = 1\n[process]\nnetwork = true\n"
    found = [(f.severity, f.line, f.key) for f in lint_text(opened)]
    assert found == [("warning", 3, "process.network"), ("info", 3, "process.network")]
    assert "commands may reach every host" in lint_text(opened)[0].message
    filtered = 'version = 1\n[network]\nallow = ["pypi.org"]\n'
    findings = lint_text(filtered)
    assert [(f.severity, f.line, f.key) for f in findings] == [("info", 2, "network")]
    assert "require_isolation = true" in findings[0].message
    isolated = "version = 1\n[process]\nrequire_isolation = true\n" + filtered[12:]
    assert [f.key for f in lint_text(isolated)] == ["process.require_isolation"]


def test_lint_reports_a_bad_pattern_as_an_error_with_its_line() -> None:
    text = 'version = 1\n[network]\nallow = [\n  "pypi.org",\n  "https://x.test/",\n]\n'
    (finding,) = lint_text(text)
    assert (finding.severity, finding.line, finding.key) == ("error", 5, "network.allow.1")
    assert "give the host alone, e.g. x.test" in finding.message


# -- 4. properties ------------------------------------------------------------------------------

ANY_TEXT = st.one_of(
    st.text(st.characters(exclude_categories=()), max_size=40),  # surrogates and NULs too
    st.sampled_from(["\ud800", "\x00", "a" * 64, "a." * 200 + "b", "[", "[]", "::", "*", "."]),
    st.text("abc.-:[]*0123456789xn", max_size=30),
)
ANY_PORT = st.one_of(
    st.integers(), st.integers(-(10**30), 10**30), st.sampled_from([10**5000, -(10**5000)])
)
LABEL = st.from_regex(r"[a-z0-9]([a-z0-9-]{0,10}[a-z0-9])?", fullmatch=True)
# names, not addresses: a last label of digits would make one (and "*.2.3.4" no pattern)
NAME = (
    st.lists(LABEL, min_size=1, max_size=5)
    .map(".".join)
    .filter(lambda n: not n.rpartition(".")[2].isdigit() and normalise(n) == n)
)
PORT = st.sampled_from([80, 443, 22, 8080])


@settings(max_examples=300, deadline=None)
@given(ANY_TEXT, ANY_PORT)
def test_decide_never_raises_and_denies_what_is_no_host(host: str, port: int) -> None:
    egress = rules("*:*", "*.b:*", "a.b")  # allows every host there is
    decision = egress.decide(host, port)
    assert decision.target is not None
    assert decision.target.isascii()
    decision.reason.encode("utf-8")
    if normalise(host) is None or not 0 < port < 65536:
        assert (decision.effect, decision.rule) == (Effect.DENY, "network.invalid")
    else:
        assert decision.effect is Effect.ALLOW


@settings(max_examples=300, deadline=None)
@given(ANY_TEXT)
def test_normalise_is_idempotent_and_never_raises(host: str) -> None:
    once = normalise(host)
    if once is not None:
        assert normalise(once) == once
        assert once.isascii()
        assert once == once.lower()
        assert not once.endswith(".")


@settings(max_examples=200, deadline=None)
@given(st.text(st.characters(exclude_categories=("Cs",)), min_size=1, max_size=20))
def test_unicode_names_normalise_to_one_spelling(text: str) -> None:
    name = text + ".example"
    once = normalise(name)
    if once is not None:
        assert normalise(once) == once
        assert normalise(name + ".") == once


@settings(max_examples=200, deadline=None)
@given(ANY_TEXT)
def test_parse_pattern_reads_or_says_why_not(text: str) -> None:
    # nothing but ValueError comes out of reading a pattern: loading turns it into a problem
    try:
        pattern = parse_pattern(text)
    except ValueError as exc:
        message = str(exc)
    else:
        assert pattern.text == text
        message = text
    assert message


def forms(name: str) -> st.SearchStrategy[str]:
    """Patterns that may name ``name``: itself, ``*.`` over one of its domains, ``*``; with no
    port, a port or any port."""
    labels = name.split(".")
    hosts = [name, "*", *("*." + ".".join(labels[i:]) for i in range(1, len(labels)))]
    return st.tuples(st.sampled_from(hosts), st.sampled_from(["", ":443", ":22", ":*"])).map(
        "".join
    )


@settings(max_examples=300, deadline=None)
@given(st.data())
def test_deny_always_wins_over_allow(data: st.DataObject) -> None:
    name = data.draw(NAME)
    port = data.draw(PORT)
    allow = data.draw(st.lists(forms(name), max_size=3))
    deny = data.draw(st.lists(forms(name), max_size=3))
    both = rules(*allow, deny=tuple(deny)).decide(name, port)
    by_deny = rules(deny=tuple(deny)).decide(name, port)
    by_allow = rules(*allow).decide(name, port)
    if by_deny.rule and by_deny.rule.startswith("network.deny"):
        assert (both.effect, both.rule) == (Effect.DENY, by_deny.rule)
    elif by_allow.effect is Effect.ALLOW:
        assert (both.effect, both.rule) == (Effect.ALLOW, by_allow.rule)
    else:
        assert (both.effect, both.rule) == (Effect.DENY, "network.unlisted")


@settings(max_examples=200, deadline=None)
@given(NAME, st.integers(1, 65535))
def test_a_name_matched_by_allow_and_deny_is_denied(name: str, port: int) -> None:
    egress = rules(f"{name}:*", deny=(f"{name}:{port}",))
    assert egress.decide(name, port).effect is Effect.DENY
    assert egress.decide(name.upper() + ".", port).effect is Effect.DENY


def test_a_network_table_requires_the_box_for_commands() -> None:
    """Without bubblewrap a command has the whole network: under a table that lists hosts, it
    must be refused rather than run."""
    policy = Policy.from_dict({"network": {"allow": ["pypi.org"]}})
    unboxed = Request("agent", "run_shell", "execute", command="pip download x", isolated=False)
    boxed = unboxed._replace(isolated=True)
    assert policy.decide(unboxed).effect is Effect.DENY
    assert policy.decide(boxed).effect is not Effect.DENY
    assert Policy.from_dict({}).decide(unboxed).effect is not Effect.DENY
