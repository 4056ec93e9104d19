"""HTTP/2 over real loopback sockets: curl, nghttp, TLS with ALPN, shutdown."""

from __future__ import annotations

import shutil
import ssl
import subprocess
from pathlib import Path

import h2.settings
import pytest
import trio
import trustme
from hyperframe.frame import DataFrame, Frame, HeadersFrame, RstStreamFrame, WindowUpdateFrame

from .conftest import make_config, running_server
from .h2client import H2Client

pytestmark = pytest.mark.slow

S = h2.settings.SettingCodes
CURL = shutil.which("curl")
NGHTTP = shutil.which("nghttp")


@pytest.fixture(scope="module")
def ca() -> trustme.CA:
    return trustme.CA()


@pytest.fixture
def tls_files(ca: trustme.CA, tmp_path: Path) -> tuple[Path, Path, Path]:
    leaf = ca.issue_cert("127.0.0.1", "localhost")
    cert, key, cafile = tmp_path / "cert.pem", tmp_path / "key.pem", tmp_path / "ca.pem"
    leaf.cert_chain_pems[0].write_to_path(str(cert))
    leaf.private_key_pem.write_to_path(str(key))
    ca.cert_pem.write_to_path(str(cafile))
    return cert, key, cafile


async def _run(*argv: str) -> subprocess.CompletedProcess[bytes]:
    with trio.fail_after(20):
        return await trio.run_process(list(argv), capture_stdout=True, capture_stderr=True)


@pytest.mark.skipif(CURL is None, reason="curl is not installed")
async def test_curl_prior_knowledge(root: Path) -> None:
    assert CURL is not None
    async with running_server(make_config(root)) as (srv, port):
        base = f"http://127.0.0.1:{port}"
        out = await _run(
            CURL,
            "-s",
            "--http2-prior-knowledge",
            "-w",
            "\n%{http_code} %{http_version}",
            f"{base}/hello.txt",
        )
        big = await _run(CURL, "-s", "--http2-prior-knowledge", f"{base}/big.bin")
        rng = await _run(
            CURL,
            "-s",
            "--http2-prior-knowledge",
            "-r",
            "5-9",
            "-w",
            " %{http_code}",
            f"{base}/big.bin",
        )
        h1 = await _run(CURL, "-s", "--http1.1", f"{base}/hello.txt")  # same port
    assert out.stdout == b"hello world\n\n200 2"
    assert big.stdout == (root / "big.bin").read_bytes()
    assert rng.stdout == (root / "big.bin").read_bytes()[5:10] + b" 206"
    assert h1.stdout == b"hello world\n"
    assert srv.stats.h2.connections == 3 and srv.stats.h2.streams == 3


@pytest.mark.skipif(NGHTTP is None, reason="nghttp (nghttp2-client) is not installed")
async def test_nghttp_multiplexes_streams(root: Path) -> None:
    assert NGHTTP is not None
    async with running_server(make_config(root)) as (srv, port):
        base = f"http://127.0.0.1:{port}"
        urls = [f"{base}/hello.txt", f"{base}/big.bin", f"{base}/sub/", f"{base}/nope"]
        out = await _run(NGHTTP, "-n", "-s", *urls)
    assert out.returncode == 0, out.stderr
    text = out.stdout.decode()
    for code, path in (("200", "/hello.txt"), ("200", "/big.bin"), ("404", "/nope")):
        assert any(code in line and line.endswith(path) for line in text.splitlines()), text
    assert srv.stats.h2.connections == 1 and srv.stats.h2.streams == 4


@pytest.mark.skipif(NGHTTP is None, reason="nghttp (nghttp2-client) is not installed")
async def test_nghttp_verbose_frames_over_h2c(root: Path) -> None:
    """``nghttp -nv``: the server's SETTINGS, then HEADERS and DATA with END_STREAM."""
    assert NGHTTP is not None
    async with running_server(make_config(root)) as (srv, port):
        out = await _run(NGHTTP, "-nv", f"http://127.0.0.1:{port}/hello.txt")
    assert out.returncode == 0, out.stderr
    text = out.stdout.decode()
    settings = text[text.index("recv SETTINGS frame") :]
    assert "[SETTINGS_ENABLE_PUSH(0x02):0]" in settings  # RFC 9113 section 8.4: no push
    assert "[SETTINGS_MAX_CONCURRENT_STREAMS(0x03):" in settings
    assert "; ACK" in text[text.index("recv SETTINGS frame") :]
    assert "recv (stream_id=13) :status: 200" in text
    assert "recv (stream_id=13) content-length: 12" in text
    data = text[text.index("recv DATA frame") :]
    assert data.startswith("recv DATA frame <length=12, flags=0x01, stream_id=13>")
    assert "; END_STREAM" in data.splitlines()[1]
    assert srv.stats.h2.connections == 1 and srv.stats.h2.streams == 1


@pytest.mark.skipif(NGHTTP is None, reason="nghttp (nghttp2-client) is not installed")
async def test_nghttp_fetches_a_page_and_its_assets_on_one_connection(root: Path) -> None:
    """``nghttp -a`` parses the HTML and requests its stylesheet, script and image
    as further streams of the same connection."""
    assert NGHTTP is not None
    (root / "app").mkdir()
    (root / "app" / "index.html").write_text(
        '<!doctype html><link rel=stylesheet href="s.css"><script src="a.js"></script>'
        '<img src="i.png">'
    )
    for name in ("s.css", "a.js", "i.png"):
        (root / "app" / name).write_bytes(name.encode() * 100)
    async with running_server(make_config(root)) as (srv, port):
        out = await _run(NGHTTP, "-ans", f"http://127.0.0.1:{port}/app/")
    assert out.returncode == 0, out.stderr
    lines = out.stdout.decode().splitlines()
    for path in ("/app/", "/app/s.css", "/app/a.js", "/app/i.png"):
        # nghttp -s: "id responseEnd requestStart process code size request path"
        [row] = [ln for ln in lines if ln.split()[-1:] == [path]]
        assert row.split()[4] == "200", row
    assert srv.stats.h2.connections == 1 and srv.stats.h2.streams == 4


@pytest.mark.skipif(NGHTTP is None, reason="nghttp (nghttp2-client) is not installed")
async def test_nghttp_over_tls_negotiates_h2_and_gets_the_exact_bytes(
    root: Path, tls_files: tuple[Path, Path, Path]
) -> None:
    assert NGHTTP is not None
    cert, key, _ = tls_files
    cfg = make_config(root, certfile=str(cert), keyfile=str(key))
    async with running_server(cfg) as (srv, port):
        url = f"https://127.0.0.1:{port}/big.bin"
        body = await _run(NGHTTP, url)  # the body goes to stdout
        verbose = await _run(NGHTTP, "-nv", url)
    assert body.returncode == 0, body.stderr
    assert body.stdout == (root / "big.bin").read_bytes()
    text = verbose.stdout.decode()
    assert "The negotiated protocol: h2" in text
    assert f"recv (stream_id=13) content-length: {len(body.stdout)}" in text
    assert srv.stats.h2.connections == 2 and srv.stats.h2.streams == 2


@pytest.mark.skipif(CURL is None, reason="curl is not installed")
async def test_curl_http2_over_tls_alpn(root: Path, tls_files: tuple[Path, Path, Path]) -> None:
    assert CURL is not None
    cert, key, cafile = tls_files
    cfg = make_config(root, certfile=str(cert), keyfile=str(key))
    async with running_server(cfg) as (srv, port):
        base = f"https://127.0.0.1:{port}"
        out = await _run(
            CURL,
            "-s",
            "--http2",
            "--cacert",
            str(cafile),
            "-w",
            " %{http_version}",
            f"{base}/hello.txt",
            "-o",
            "/dev/null",
            f"{base}/big.bin",
        )
        h1 = await _run(
            CURL,
            "-s",
            "--http1.1",
            "--cacert",
            str(cafile),
            "-w",
            " %{http_version}",
            f"{base}/hello.txt",
        )
    assert out.returncode == 0, out.stderr
    assert out.stdout == b" 2" + (root / "big.bin").read_bytes() + b" 2"
    assert h1.stdout == b"hello world\n 1.1"
    assert srv.stats.h2.connections == 1 and srv.stats.h2.streams == 2


async def test_python_client_alpn_h2_and_off_switch(
    root: Path, ca: trustme.CA, tls_files: tuple[Path, Path, Path]
) -> None:
    cert, key, _ = tls_files
    ctx = ssl.create_default_context()
    ca.configure_trust(ctx)
    ctx.set_alpn_protocols(["h2", "http/1.1"])
    for http2, expected in ((True, "h2"), (False, "http/1.1")):
        cfg = make_config(root, certfile=str(cert), keyfile=str(key), http2=http2)
        async with running_server(cfg) as (_, port):
            tcp = await trio.open_tcp_stream("127.0.0.1", port)
            tls = trio.SSLStream(tcp, ctx, server_hostname="127.0.0.1")
            await tls.do_handshake()
            assert tls.selected_alpn_protocol() == expected
            if http2:
                client = H2Client(tls)
                await client.start()
                r = await client.get("/hello.txt")
                assert r.status == 200 and bytes(r.body) == b"hello world\n"
            await trio.aclose_forcefully(tls)


async def test_graceful_shutdown_goaway_lets_in_flight_streams_finish(root: Path) -> None:
    cfg = make_config(root, shutdown_timeout=5.0)
    async with running_server(cfg) as (srv, port):
        stream = await trio.open_tcp_stream("127.0.0.1", port)
        client = H2Client(stream)
        await client.start({S.INITIAL_WINDOW_SIZE: 0})  # the body waits for us
        first = client.request("/big.bin")
        await client.flush()
        while client.responses[first].status == 0:
            assert await client.pump()
        srv.shutdown()
        while client.goaway is None:
            assert await client.pump()
        assert client.goaway.last_stream_id == first
        assert client.goaway.error_code == 0
        # h2's client state machine accepts nothing after a GOAWAY, so the
        # rest is raw frames: a stream opened after the GOAWAY is refused,
        # the in-flight one finishes once its windows open.
        block = client.conn.encoder.encode(
            [
                (b":method", b"GET"),
                (b":path", b"/hello.txt"),
                (b":scheme", b"http"),
                (b":authority", b"x"),
            ]
        )
        late = HeadersFrame(first + 2, block, flags=["END_HEADERS", "END_STREAM"])
        opens = [WindowUpdateFrame(sid, 1 << 20) for sid in (0, first)]
        await stream.send_all(late.serialize() + b"".join(f.serialize() for f in opens))
        body = bytearray()
        ended = False
        refused = None
        buf = b""
        with trio.fail_after(10):
            while True:
                data = await stream.receive_some(65536)
                if not data:
                    break
                buf += data
                while len(buf) >= 9:
                    frame, length = Frame.parse_frame_header(memoryview(buf[:9]))
                    if len(buf) < 9 + length:
                        break
                    frame.parse_body(memoryview(buf[9 : 9 + length]))
                    buf = buf[9 + length :]
                    if isinstance(frame, DataFrame) and frame.stream_id == first:
                        body += frame.data
                        ended = ended or "END_STREAM" in frame.flags
                    elif isinstance(frame, RstStreamFrame) and frame.stream_id == first + 2:
                        refused = frame.error_code
        await stream.aclose()
    assert ended and bytes(body) == (root / "big.bin").read_bytes()
    assert refused == h2.errors.ErrorCodes.REFUSED_STREAM
    assert srv.stats.h2.refused_streams == 1 and srv.stats.responses.completed == 1
