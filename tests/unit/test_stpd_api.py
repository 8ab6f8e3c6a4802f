"""stpd's API socket at the edge: one schema for every request, one-line refusals,
no input that ends stpd or reaches struct.pack unchecked; client caps and timeouts."""

import json
import os
import resource
import socket
import threading
import time

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from stpd import api
from stpd import constants as K
from stpd.client import StClient
from tests.sim.stpd_pair import PairThread

REPORTED = [  # issue 10, item 3
    b'{"op":"bogus","uport":"x"}',
    b'{"op":"region","rid":Infinity,"uport":1099511627776}',
    b'{"op":"region","vc":1,"size":NaN}',
    b'{"op":"listen","uport":1099511627776}',
    b'{"op":"listen","uport":' + b"9" * 5000 + b"}",
    b"[" * 100_000 + b"]" * 100_000,
    b'{"op":"listen","uport":' + b"[" * 50_000 + b"]" * 50_000 + b"}",
    b'{"op":"listen","uport":true}',
    b'{"op":"listen","uport":5.0}',
    b'{"op":"get","vc":1,"rid":1,"offset":-1,"length":8}',
    b'{"op":"get","vc":1,"rid":1,"offset":0,"length":65536}',
    b'{"op":"send","vc":1,"data":"%%%"}',
    b'{"op":"connect","host":"' + b"1" * 1000 + b'","uport":1}',
    b'{"op":"listen","uport":1,"extra":2}',
    b'{"op":"fetchop","vc":1,"rid":1,"offset":0,"function":"mul"}',
    b'{"op":"status","vc":0}',
    b'{"op":"send","vc":1,"dc":4,"data":""}',
    b"\xff\xfe",
    b"[]",
    b"{}",
    b"null",
    b'"op"',
]


@pytest.mark.parametrize("data", REPORTED, ids=range(len(REPORTED)))
def test_schema_refuses_with_a_request_error(data):
    with pytest.raises(api.RequestError) as exc:
        api.decode(data)
    assert "\n" not in str(exc.value)


def test_schema_accepts_and_decodes_valid_requests():
    assert api.decode(b'{"op":"put","vc":1,"rid":2,"offset":0,"data":"aGk="}')["data"] == b"hi"
    assert api.decode(b'{"op":"status"}') == {"op": "status"}
    assert api.decode(b'{"op":"listen","uport":4294967295}')["uport"] == 0xFFFFFFFF
    with pytest.raises(api.RequestError):
        api.decode(b'{"op":"listen","uport":4294967296}')


@pytest.fixture(scope="module")
def pair(tmp_path_factory):
    with PairThread(tmp_path_factory.mktemp("api")) as p:
        with StClient(p.paths[1]) as b:  # listens while this client stays
            b.listen(9)
            yield p


def raw(path, data: bytes, fds=(), timeout=2.0, owning: bool = False) -> dict | None:
    """One datagram to stpd, its answer (skipping progress), None if none came in time.
    ``owning``: the same API connection first connects to 192.0.2.2:9, and a small
    ``vc`` (1..4) in a JSON request becomes that connection (only its owner may use it)."""
    s = socket.socket(socket.AF_UNIX, socket.SOCK_SEQPACKET)
    s.settimeout(timeout)

    def answer() -> dict | None:
        # the whole answer within the time allowed: a request that waits for ever (a
        # receive nobody sends to) gets progress messages more often than ``timeout``
        deadline = time.monotonic() + s.gettimeout()
        while True:
            left = deadline - time.monotonic()
            if left <= 0:
                raise TimeoutError
            s.settimeout(left)
            got = s.recv(K.API_MAX_MSG + 1)
            if not got:  # an empty datagram reads as end of connection: stpd hangs up
                return None
            reply = json.loads(got)
            if "progress" not in reply:
                return reply

    try:
        s.connect(path)
        if owning:
            s.send(b'{"op":"connect","host":"192.0.2.2","uport":9}')
            s.settimeout(5.0)
            vc = answer()["vc"]
            s.settimeout(timeout)
            try:
                msg = json.loads(data)
            except (ValueError, RecursionError):  # junk goes as it is
                msg = None
            if isinstance(msg, dict) and type(msg.get("vc")) is int and 1 <= msg["vc"] <= 4:
                data = json.dumps({**msg, "vc": vc}, allow_nan=True).encode()
        socket.send_fds(s, [data], list(fds)) if fds else s.send(data)
        return answer()
    except (TimeoutError, ConnectionResetError, BrokenPipeError):
        return None
    finally:
        s.close()


def assert_refusal(reply):
    assert reply is not None and reply["ok"] is False, reply
    assert isinstance(reply["error"], str) and "\n" not in reply["error"]
    assert "internal error" not in reply["error"]


def test_api_socket_refuses_the_reported_inputs_and_stays_up(pair):
    big = b'{"op":"status","x":"' + b"a" * (K.API_MAX_MSG + 10) + b'"}'
    for data in REPORTED + [big]:
        reply = raw(pair.paths[0], data)
        assert_refusal(reply)
        assert reply["error"].startswith("bad request: "), reply
    st = StClient(pair.paths[0]).status()
    assert st["api"]["refused_bad_request"] >= len(REPORTED) + 1
    assert "internal_error" not in st["api"]


def test_descriptors_of_refused_requests_are_closed(pair):
    before = len(os.listdir("/proc/self/fd"))
    for _ in range(50):
        fd = os.memfd_create("junk")
        assert_refusal(raw(pair.paths[0], b'{"op":"bogus"}', [fd, fd, fd]))
        assert_refusal(raw(pair.paths[0], b'{"op":"listen","uport":1}', [fd]))  # takes no descriptor
        os.close(fd)
    assert len(os.listdir("/proc/self/fd")) <= before + 2


def _value_for(spec):
    if isinstance(spec, api.Int):
        return st.one_of(st.integers(spec.lo, min(spec.hi, spec.lo + 3)), st.just(spec.hi), st.just(spec.hi + 1),
                         st.just(spec.lo - 1), st.integers(spec.lo, spec.hi))
    if isinstance(spec, api.Str):
        return st.sampled_from(spec.choices) if spec.choices else st.sampled_from(
            ["192.0.2.2", "192.0.2.1", "192.0.2.9", "::1", ""])
    return st.binary(max_size=64).map(lambda b: __import__("base64").b64encode(b).decode())


JUNK = st.one_of(st.integers(), st.integers(-(2**80), 2**80), st.booleans(), st.none(),
                 st.floats(allow_nan=True, allow_infinity=True), st.text(max_size=80),
                 st.lists(st.integers(), max_size=3), st.dictionaries(st.text(max_size=4), st.integers(), max_size=2))


@st.composite
def requests(draw):
    kind = draw(st.integers(0, 9))
    if kind == 0:
        return draw(st.binary(max_size=200))
    if kind == 1:
        n = draw(st.integers(1, 5000))
        return draw(st.sampled_from([b"[" * n + b"]" * n, b'{"op":' * n, b'{"a":[' * n + b"]}" * n]))
    op = draw(st.sampled_from(sorted(api.SCHEMA)))
    msg = {"op": op}
    for name, spec in api.SCHEMA[op].items():
        choice = draw(st.integers(0, 9))
        if choice < 6:
            msg[name] = draw(_value_for(spec))
        elif choice < 8:
            msg[name] = draw(JUNK)
    if draw(st.integers(0, 9)) == 0:
        msg[draw(st.text(max_size=6))] = draw(JUNK)
    return json.dumps(msg, allow_nan=True).encode()


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(data=requests())
def test_fuzz_api_handler_never_fails_internally(pair, data):
    """Valid ops with mutated fields, junk and nesting against the real API loop of a
    daemon with a live connection (a small vc names it): every answer is ok or a one-line refusal;
    requests that would wait (accept, recv ...) are abandoned after a moment.  The
    fuzzing client owns that connection (another client's is refused before any use)."""
    reply = raw(pair.paths[0], data, timeout=0.3, owning=True)
    if reply is not None and not reply["ok"]:
        assert_refusal(reply)
    assert pair.inside(lambda ds: ds[0].api_counters.get("internal_error", 0)) == 0


def test_fuzz_left_stpd_serving_with_nothing_pending(pair):
    with StClient(pair.paths[0]) as a:
        assert "vcs" in a.status()
    time.sleep(0.5)  # abandoned requests finish their clean-up
    assert pair.inside(lambda ds: (len(ds[0].pending), len(ds[0].results), ds[0].api_clients)) == (0, 0, 0)
    # receives of abandoned requests were withdrawn, their transfers ended
    assert pair.inside(lambda ds: [(len(v.posted), len(v.rx), len(v.tx)) for v in ds[0].core.vcs.values()
                                   if (len(v.posted), len(v.rx), len(v.tx)) != (0, 0, 0)]) == []


def test_many_idle_clients_are_capped_and_timed_out(tmp_path):
    with PairThread(tmp_path, api_max_clients=8, api_first_request_timeout=0.5) as p:
        idle = []
        for _ in range(8):
            s = socket.socket(socket.AF_UNIX, socket.SOCK_SEQPACKET)
            s.connect(p.paths[0])
            idle.append(s)
        time.sleep(0.1)
        extra = socket.socket(socket.AF_UNIX, socket.SOCK_SEQPACKET)
        extra.settimeout(2)
        extra.connect(p.paths[0])
        assert "too many API clients" in json.loads(extra.recv(4096))["error"]
        for s in idle:  # each silent client gets one line, then EOF
            s.settimeout(3)
            assert "no request for 0.5 s" in json.loads(s.recv(4096))["error"]
            assert s.recv(4096) == b""
            s.close()
        with StClient(p.paths[0]) as a:
            st = a.status()
        assert st["api"]["refused_too_many_clients"] >= 1 and st["api"]["closed_silent"] == 8


def test_idle_timeout_spares_a_client_waiting_on_its_request(tmp_path):
    with PairThread(tmp_path, api_first_request_timeout=0.3, api_idle_timeout=0.3) as p:
        with StClient(p.paths[1]) as b, StClient(p.paths[0]) as a, StClient(p.paths[0]) as idle:
            idle.status()
            b.listen(9)
            vc = a.connect("192.0.2.2", 9)
            bvc, _ = b.accept(9)
            got = {}

            def late_sender():  # `a` keeps clear of the idle timeout (closing it would close vc)
                end = time.monotonic() + 1.5
                while time.monotonic() < end:
                    a.status()
                    time.sleep(0.1)
                a.send_bytes(vc, b"x" * 1000)

            t = threading.Thread(target=late_sender)
            t.start()
            got["data"] = b.recv_bytes(bvc, 4096)  # waits 1.5 s > the idle timeout
            t.join(10)
            assert got["data"] == b"x" * 1000
        with StClient(p.paths[0]) as a:
            assert a.status()["api"].get("closed_idle", 0) >= 1  # `idle` sat idle while b waited


def test_accept_emfile_is_counted_and_survived(tmp_path):
    with PairThread(tmp_path) as p:
        clients = [socket.socket(socket.AF_UNIX, socket.SOCK_SEQPACKET) for _ in range(4)]
        soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
        n_open = len(os.listdir("/proc/self/fd"))
        resource.setrlimit(resource.RLIMIT_NOFILE, (n_open - 1, hard))
        try:
            for c in clients:
                c.connect(p.paths[0])  # queued in the backlog: stpd's accept() has no descriptor
            time.sleep(0.5)
            failed = p.inside(lambda ds: ds[0].api_counters.get("accept_failed_emfile", 0))
        finally:
            resource.setrlimit(resource.RLIMIT_NOFILE, (soft, hard))
        assert failed >= 1
        for c in clients:  # served once descriptors are back
            c.settimeout(5)
            c.send(b'{"op":"status"}')
            assert json.loads(c.recv(K.API_MAX_MSG))["ok"]
            c.close()


@pytest.mark.parametrize("data", [
    b'"' + b'\\"' * 60_000,  # an unterminated string of escaped quotes (was quadratic: minutes)
    b'["' + b'\\"[' * 40_000,
    b'"[" ' * 30_000,
    b'"' + b"\\" * 120_000 + b'"',
    b'{"a":' * 20_000,
])
def test_edge_checks_are_linear(data):
    t = time.perf_counter()
    with pytest.raises(api.RequestError):
        api.decode(data)
    assert time.perf_counter() - t < 0.5


def test_bracket_scan_skips_strings_and_escapes():
    assert api.brackets(b'{"a":"[[[[[[\\"[[[["}') == 1
    assert api.brackets(b'{"a":"\\\\","b":[[[[[[]]]]]]}') == 7
    assert api.brackets(b'{"op":"status"}') == 1
