"""Fuzzing the HTTP intake: the real service (uvicorn, its own process, loopback only) on the embedded
log, hammered with hostile requests over one keep-alive connection.

Asserted for every request: no 5xx; a refusal names its errors by field and code and says where it was
recorded. Over the run: every 4xx answer is one SubmissionRejected in the log (counted, by event id),
the connection is never reset (one client address throughout), and the server's resident memory after
the run stays within a bound of what it was after a warm-up. A few hundred requests by default (seconds);
``-m slow`` runs a larger budget.

Requests are valid HTTP carrying hostile content: bodies built from command templates with fields
swapped for random JSON, random bytes spliced in, deep nesting, lone surrogates, NaN and huge numbers,
duplicate keys, truncation; odd unit ids in the path, odd or missing credentials and idempotency keys.
"""

from __future__ import annotations

import json
from collections import Counter
from typing import Any
from urllib.parse import quote

import httpx
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from ledger.journal import Journal
from ledger.log.sqlite import SqliteLog
from producers.credentials import CredentialStore

FAST_BUDGET = 200
SLOW_BUDGET = 3000
RSS_GROWTH_BOUND_KIB = 64 * 1024

ROUTES = {
    "define": "/elections",
    "open": "/units/{unit}/open",
    "report": "/units/{unit}/results",
    "correct": "/units/{unit}/corrections",
    "toss": "/units/{unit}/ties",
}
COUNTS = {"Biden": 25, "Buttigieg": 35, "Sanders": 31}
TEMPLATES: dict[str, dict[str, Any]] = {
    "define": {"election_id": "fz", "name": "Fuzz", "rule_set": "idp-2020", "candidates": ["Biden", "Sanders"],
               "counties": [{"county_id": "c", "name": "C", "sde_ratio": "21/150"}],
               "units": [{"unit_id": "Z1", "name": "Z 1", "county_id": "c", "delegates": 3}]},
    "open": {"attendance": 91},
    "report": {"first_alignment": COUNTS, "final_alignment": COUNTS, "attendance": 91, "delegates_reported": {"Biden": 3, "Buttigieg": 5, "Sanders": 4}},
    "correct": {"first_alignment": COUNTS, "final_alignment": COUNTS, "supersedes": "x", "reason": "r", "authority": "a", "stage": "review"},
    "toss": {"contenders": ["Biden", "Sanders"], "seats": 1, "winners": ["Biden"], "method": "coin", "caller": "c"},
}  # fmt: skip
FIELDS = sorted({k for t in TEMPLATES.values() for k in t} | {"unit_id", "election_id", "idempotency_key", "occurred_at", "reporter"})


# -- JSON-ish text, hostile at every leaf ----------------------------------------------------------------

_KEYS = st.one_of(st.sampled_from([*FIELDS, "Biden", "Sanders", "Warren"]), st.text(max_size=8)).map(json.dumps)
_LEAVES = st.one_of(
    st.sampled_from(["null", "true", "false", "NaN", "Infinity", "-Infinity", "1e400", "-1e400", "-0", "0.5", "1.0", '""', "{}", "[]"]),
    st.integers(-(10**7), 10**7).map(str),
    st.integers(20, 6000).map(lambda n: "9" * n),
    st.text(max_size=12).map(json.dumps),
    st.integers(0xD800, 0xDFFF).map(lambda c: f'"a\\u{c:04x}b"'),  # a lone surrogate, escaped
    st.sampled_from(['"FM5"', '"E01"', '"ia-test"', '"2020-02-03T19:00:00Z"', '"sha256:' + "a" * 64 + '"']),
)
_JSON = st.recursive(
    _LEAVES,
    lambda inner: st.one_of(
        st.lists(inner, max_size=4).map(lambda items: "[" + ",".join(items) + "]"),
        st.lists(st.tuples(_KEYS, inner), max_size=4).map(lambda kv: "{" + ",".join(f"{k}:{v}" for k, v in kv) + "}"),
    ),
    max_leaves=12,
)


@st.composite
def _field_swapped(draw: st.DrawFn, kind: str) -> bytes:
    """A command template with some fields replaced by random JSON (possibly named twice)."""
    body = {k: json.dumps(v) for k, v in TEMPLATES[kind].items()}
    for _ in range(draw(st.integers(1, 3))):
        body[draw(st.sampled_from(FIELDS))] = draw(_JSON)
    pairs = list(body.items())
    if draw(st.booleans()):
        pairs.append(draw(st.sampled_from(pairs)))  # a key given twice
    return ("{" + ",".join(f"{json.dumps(k)}:{v}" for k, v in pairs) + "}").encode()


@st.composite
def _spliced(draw: st.DrawFn, kind: str) -> bytes:
    """A valid body with random bytes spliced in, or cut short."""
    text = json.dumps(TEMPLATES[kind]).encode()
    at = draw(st.integers(0, len(text)))
    if draw(st.booleans()):
        return text[:at]
    return text[:at] + draw(st.binary(min_size=1, max_size=16)) + text[at:]


_DEEP = st.tuples(st.integers(1, 150_000), st.sampled_from(["[", '{"a":'])).map(
    lambda d: (d[1] * d[0] + "1" + ("]" if d[1] == "[" else "}") * d[0]).encode()
)


def _bodies(kind: str) -> st.SearchStrategy[bytes]:
    return st.one_of(
        st.just(json.dumps(TEMPLATES[kind]).encode()),
        _field_swapped(kind),
        _spliced(kind),
        _JSON.map(str.encode),
        _DEEP,
        st.binary(max_size=64),
    )


_UNITS = st.one_of(
    st.sampled_from(["FM5", "E01", "E10", "UIHC", "Z1"]),
    st.text(alphabet=st.characters(blacklist_characters="/?#%", blacklist_categories=("Cs",)), min_size=1, max_size=20),
    st.binary(min_size=1, max_size=6).map(lambda b: quote(b.replace(b"/", b"_"), safe="")),  # percent-encoded, not UTF-8
).filter(lambda u: u.strip(".") != "")  # "." and ".." are path segments a client resolves away; "/" would leave the route
_KEY_HEADERS = st.one_of(
    st.none(),
    st.from_regex(r"[A-Za-z0-9][A-Za-z0-9._:@/+=-]{0,20}", fullmatch=True).map(str.encode),
    st.binary(min_size=1, max_size=40)  # any byte HTTP allows in a header value: visible ASCII and 0x80-0xFF
    .map(lambda b: bytes(c for c in b if 0x21 <= c != 0x7F))
    .filter(bool),
    st.just(b"k" * 5000),
)


@st.composite
def requests(draw: st.DrawFn) -> tuple[str, bytes, dict[str, bytes]]:
    kind = draw(st.sampled_from(list(ROUTES)))
    unit = draw(_UNITS)
    path = ROUTES[kind].format(unit=unit if "%" in unit else quote(unit, safe=""))
    headers: dict[str, bytes] = {"Content-Type": b"application/json"}
    auth = draw(st.sampled_from(["official"] * 6 + ["chair", "garbage", "none", "bytes"]))  # mostly past authentication
    headers["Authorization"] = {"garbage": b"Bearer ckl_dead_beef", "none": b"", "bytes": b"Bearer \xff\xfe"}.get(auth, auth.encode())
    key = draw(_KEY_HEADERS)
    if key is not None:
        headers["Idempotency-Key"] = key
    return path, draw(_bodies(kind)), headers


# -- the run ---------------------------------------------------------------------------------------------


class _Run:
    """Sends requests over one client and keeps the figures the assertions need."""

    def __init__(self, http: httpx.Client, tokens: dict[str, bytes]) -> None:
        self.http = http
        self.tokens = tokens
        self.statuses: Counter[int] = Counter()
        self.refusals: list[str] = []
        self.addresses: set[Any] = set()

    def send(self, path: str, body: bytes, headers: dict[str, bytes]) -> None:
        auth = headers.get("Authorization", b"")
        headers = {**headers, "Authorization": self.tokens.get(auth.decode(errors="replace"), auth)}
        headers = {k: v for k, v in headers.items() if v}
        response = self.http.post(path, content=body, headers=headers)
        self.statuses[response.status_code] += 1
        self.addresses.add(response.extensions["network_stream"].get_extra_info("client_addr"))
        assert response.status_code < 500, (path, body[:200], response.status_code, response.text[:500])
        if 400 <= response.status_code < 500:
            doc = response.json()
            assert doc["status"] == "rejected" and doc["errors"], doc
            assert all(isinstance(e[k], str) and e[k] for e in doc["errors"] for k in ("field", "code", "message")), doc
            assert doc["rejection"]["recorded"] == "log", doc
            self.refusals.append(doc["rejection"]["event_id"])


def _fuzz(serve_intake: Any, budget: int, election: dict[str, Any]) -> dict[str, Any]:
    served = serve_intake()
    store = CredentialStore(served.data_dir / "credentials.json")
    tokens = {
        "official": served.official["Authorization"].encode(),
        "chair": f"Bearer {store.issue('chair', unit_id='FM5')[1]}".encode(),
    }
    with httpx.Client(base_url=served.base, timeout=60) as http:
        assert http.post("/elections", json=election, headers=served.official).status_code == 201
        run = _Run(http, tokens)
        # warm-up: the largest and deepest bodies once, so allocator pools are sized before measuring
        for depth in (1_000, 50_000, 150_000):
            run.send("/units/FM5/results", b"[" * depth + b"]" * depth, {"Authorization": b"official"})
        run.send("/elections", b"{" + b'"a":1,' * 150_000 + b'"b":2}', {"Authorization": b"official"})
        rss_before = served.rss_kib()

        @settings(max_examples=budget, deadline=None, database=None,
                  suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large, HealthCheck.filter_too_much])  # fmt: skip
        @given(request=requests())
        def one(request: tuple[str, bytes, dict[str, bytes]]) -> None:
            run.send(*request)

        one()
        rss_after = served.rss_kib()
        health = http.get("/health").json()
    journal = Journal(SqliteLog(served.log_path))
    try:
        recorded = {le.event.event_id for le in journal.read() if le.event.type == "SubmissionRejected"}
    finally:
        journal.close()
    answered = sum(n for status, n in run.statuses.items() if 400 <= status < 500)
    figures = {
        "requests": sum(run.statuses.values()), "statuses": dict(sorted(run.statuses.items())), "refusals_answered": answered,
        "refusals_recorded": len(recorded), "connections": len(run.addresses), "rss_kib_before": rss_before,
        "rss_kib_after": rss_after, "spool_pending": health["spool"]["pending"],
    }  # fmt: skip
    print("fuzz figures:", json.dumps(figures))
    assert set(run.refusals) == recorded and len(run.refusals) == answered == len(recorded), figures
    assert len(run.addresses) == 1, f"the keep-alive connection was not kept: {figures}"
    assert health["spool"]["pending"] == 0 and health["status"] == "ok", health
    assert rss_after - rss_before < RSS_GROWTH_BOUND_KIB, figures
    return figures


def test_fuzzing_the_http_intake(serve_intake: Any, election: dict[str, Any]) -> None:
    figures = _fuzz(serve_intake, FAST_BUDGET, election)
    assert figures["requests"] >= FAST_BUDGET


@pytest.mark.slow
def test_fuzzing_the_http_intake_at_length(serve_intake: Any, election: dict[str, Any]) -> None:
    figures = _fuzz(serve_intake, SLOW_BUDGET, election)
    assert figures["requests"] >= SLOW_BUDGET
