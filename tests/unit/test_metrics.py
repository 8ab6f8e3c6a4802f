"""Prometheus metrics: the text format, the request parser against any bytes, and the
server's bounds (client cap, head timeout), scraped over real TCP sockets."""

from __future__ import annotations

import re
import socket
from collections import Counter

import trio
from hypothesis import given, settings, strategies as st

from daemons.constants import METRICS_MAX_REQUEST
from daemons.runtime.metrics import Family, answer, counter_families, exposition, parse_listen, serve_metrics

SAMPLE = re.compile(r'^[a-zA-Z_:][a-zA-Z0-9_:]*(\{([a-zA-Z_][a-zA-Z0-9_]*="([^"\\\n]|\\[\\"n])*",?)*\})? \S+$')


def check_format(text: str) -> None:
    """Every line a comment (HELP/TYPE) or a sample; TYPE before a name's samples."""
    typed = set()
    for line in text.rstrip("\n").split("\n"):  # the format's only line end is \n
        if line.startswith("# TYPE "):
            typed.add(line.split()[2])
        elif not line.startswith("# HELP "):
            assert SAMPLE.match(line), line
            assert re.match(r"[^{ ]+", line).group(0) in typed, line


def test_exposition_text():
    fams = [Family("gsn_link_up", "gauge", "1 while up.").add(1, interface="gsn0"),
            Family("gsn_link_up", "gauge", "1 while up.").add(0, interface='we"ird\\\n'),
            Family("gsn_x_seconds", "gauge", "x").add(float("nan")).add(0.25, a="b")]
    text = exposition(fams)
    assert text == ('# HELP gsn_link_up 1 while up.\n# TYPE gsn_link_up gauge\ngsn_link_up{interface="gsn0"} 1\n'
                    'gsn_link_up{interface="we\\"ird\\\\\\n"} 0\n'
                    '# HELP gsn_x_seconds x\n# TYPE gsn_x_seconds gauge\ngsn_x_seconds NaN\ngsn_x_seconds{a="b"} 0.25\n')
    check_format(text)


def test_drop_counters_are_one_metric_with_a_reason():
    fams = counter_families({"rx_drop_bad_lcrc": 3, "tx_messages": 7, "refused_busy": 1}, "link", interface="gsn0")
    text = exposition(fams)
    assert 'gsn_drops_total{interface="gsn0",component="link",reason="rx_drop_bad_lcrc"} 3' in text
    assert 'gsn_drops_total{interface="gsn0",component="link",reason="refused_busy"} 1' in text
    assert 'gsn_events_total{interface="gsn0",component="link",name="tx_messages"} 7' in text
    check_format(text)


def test_parse_listen():
    assert parse_listen("127.0.0.1:9640") == ("127.0.0.1", 9640)
    assert parse_listen("[::1]:9640") == ("::1", 9640)
    for bad in ("9640", "host:", ":9640", "h:0", "h:65536", "h:x"):
        try:
            parse_listen(bad)
        except ValueError as exc:
            assert "is not HOST:PORT" in str(exc)
        else:
            raise AssertionError(bad)


def _collect():
    return [Family("gsn_test", "gauge", "t").add(1)]


def test_answers():
    c = Counter()
    ok = answer(b"GET /metrics HTTP/1.1\r\nHost: x\r\n\r\n", _collect, c)
    assert ok.startswith(b"HTTP/1.1 200 OK\r\nContent-Type: text/plain; version=0.0.4; charset=utf-8\r\n")
    assert ok.endswith(b"\r\n\r\n# HELP gsn_test t\n# TYPE gsn_test gauge\ngsn_test 1\n")
    assert answer(b"HEAD /metrics?x=1 HTTP/1.0\r\n\r\n", _collect, c).endswith(b"Connection: close\r\n\r\n")
    assert answer(b"POST /metrics HTTP/1.1\r\n\r\n", _collect, c).startswith(b"HTTP/1.1 405 ")
    assert answer(b"GET / HTTP/1.1\r\n\r\n", _collect, c).startswith(b"HTTP/1.1 404 ")
    assert answer(b"\x00\xff", _collect, c).startswith(b"HTTP/1.1 400 ")
    assert answer(b"GET /metrics HTTP/1.1\r\n" + b"a" * METRICS_MAX_REQUEST, _collect, c).startswith(b"HTTP/1.1 400 ")
    assert c == {"scrapes": 2, "refused_bad_request": 3, "refused_not_found": 1}


@settings(max_examples=500, deadline=None)
@given(st.binary(max_size=2 * METRICS_MAX_REQUEST) | st.builds(
    lambda m, p, v, rest: m + b" " + p + b" " + v + b"\r\n" + rest,
    st.sampled_from([b"GET", b"HEAD", b"PUT", b"", b"G\x00T"]), st.binary(max_size=64),
    st.sampled_from([b"HTTP/1.1", b"HTTP/", b"X"]), st.binary(max_size=256)))
def test_any_bytes_get_one_http_answer(head):
    c = Counter()
    out = answer(head, _collect, c)
    status = out.split(b"\r\n", 1)[0]
    assert re.fullmatch(rb"HTTP/1\.1 (200 OK|400 Bad Request|405 Method Not Allowed|404 Not Found)", status)
    assert sum(c.values()) == 1


def _get(port: int, data: bytes = b"GET /metrics HTTP/1.1\r\nHost: t\r\n\r\n") -> bytes:
    with socket.create_connection(("127.0.0.1", port), timeout=10) as s:
        s.sendall(data)
        out = b""
        while chunk := s.recv(65536):
            out += chunk
    return out


async def test_server_bounds_clients_and_silence():
    counters = Counter()
    async with trio.open_nursery() as nursery:
        port = (await nursery.start(lambda task_status: serve_metrics(
            ("127.0.0.1", 0), _collect, counters=counters, max_clients=2, timeout=0.5, task_status=task_status)))[1]
        silent = [socket.create_connection(("127.0.0.1", port)) for _ in range(2)]  # hold both slots
        await trio.sleep(0.1)
        busy = await trio.to_thread.run_sync(_get, port)
        assert busy.startswith(b"HTTP/1.1 503 ")
        await trio.sleep(0.6)  # the silent two time out and free their slots
        ok = await trio.to_thread.run_sync(_get, port)
        assert ok.startswith(b"HTTP/1.1 200 OK") and b"\ngsn_test 1\n" in ok
        assert b'gsn_metrics_refused_total{reason="busy"} 1' in ok
        assert b'gsn_metrics_refused_total{reason="timeout"} 2' in ok
        for s in silent:
            try:
                assert s.recv(100) == b""  # closed by the server
            except ConnectionResetError:  # closed by the server too (an abortive close)
                pass
            s.close()
        nursery.cancel_scope.cancel()
    assert counters["refused_busy"] == 1 and counters["refused_timeout"] == 2 and counters["scrapes"] == 1


@settings(max_examples=300, deadline=None)
@given(st.dictionaries(st.sampled_from(["interface", "reason", "vc"]), st.text(max_size=20), max_size=3),
       st.one_of(st.integers(min_value=0, max_value=2**64), st.floats(allow_nan=True, allow_infinity=True)))
def test_any_label_value_renders_one_valid_line(labels, value):
    text = exposition([Family("gsn_t", "gauge", "t").add(value, **labels)])
    check_format(text)
    assert text.count("\n") == 3 and text.endswith("\n")  # HELP, TYPE, one sample: no label value breaks a line
