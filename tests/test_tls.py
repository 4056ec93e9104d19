"""TLS over real sockets on 127.0.0.1 with trustme certificates."""

from __future__ import annotations

import ssl
from pathlib import Path

import pytest
import trio
import trustme
from cryptography.hazmat.primitives import serialization

from serverio import ConfigError
from serverio.net.tls import make_ssl_context

from .conftest import HTTPClient, make_config, running_server, wait_until


def client_context(ca: trustme.CA) -> ssl.SSLContext:
    ctx = ssl.create_default_context()
    ca.configure_trust(ctx)
    return ctx


async def tls_connect(port: int, ctx: ssl.SSLContext) -> HTTPClient:
    tcp = await trio.open_tcp_stream("127.0.0.1", port)
    stream = trio.SSLStream(tcp, ctx, server_hostname="127.0.0.1", https_compatible=True)
    try:
        await stream.do_handshake()
    except BaseException:
        await trio.aclose_forcefully(tcp)
        raise
    return HTTPClient(stream)


@pytest.mark.parametrize("fs_workers", [0, 2])
async def test_https_get_alpn_and_buffered_bodies(
    root: Path, ca: trustme.CA, cert_files: tuple[Path, Path], fs_workers: int
) -> None:
    certfile, keyfile = cert_files
    cfg = make_config(
        root,
        certfile=str(certfile),
        keyfile=str(keyfile),
        fs_workers=fs_workers,
        fs_queue=4 if fs_workers else 0,
    )
    big = (root / "big.bin").read_bytes()
    async with running_server(cfg) as (srv, port):
        ctx = client_context(ca)
        ctx.set_alpn_protocols(["http/1.1"])
        client = await tls_connect(port, ctx)
        assert isinstance(client.stream, trio.SSLStream)
        assert client.stream.selected_alpn_protocol() == "http/1.1"
        assert client.stream.version() in ("TLSv1.2", "TLSv1.3")
        r = await client.get("/hello.txt")
        r2 = await client.get("/big.bin")  # keep-alive over TLS, large body
        await client.stream.aclose()
    assert r.status == 200 and r.body == b"hello world\n"
    assert r2.body == big
    # No sendfile through TLS: the file body went through user space.
    sent = srv.stats.responses
    assert sent.sendfile_responses == 0 and sent.buffered_responses == 1


@pytest.mark.filterwarnings("ignore:ssl.TLSVersion.TLSv1_1 is deprecated:DeprecationWarning")
@pytest.mark.filterwarnings("ignore:ssl.TLSVersion.MINIMUM_SUPPORTED:DeprecationWarning")
async def test_old_tls_versions_refused(
    root: Path, ca: trustme.CA, cert_files: tuple[Path, Path]
) -> None:
    certfile, keyfile = cert_files
    cfg = make_config(root, certfile=str(certfile), keyfile=str(keyfile))
    async with running_server(cfg) as (srv, port):
        ctx = client_context(ca)
        ctx.minimum_version = ssl.TLSVersion.MINIMUM_SUPPORTED
        ctx.maximum_version = ssl.TLSVersion.TLSv1_1
        try:
            ctx.set_ciphers("ALL:@SECLEVEL=0")
        except ssl.SSLError:
            pass
        with pytest.raises(trio.BrokenResourceError):
            await tls_connect(port, ctx)
        await wait_until(lambda: srv.stats.conns.tls_handshake_failures == 1)
    assert srv.stats.responses.completed == 0


async def test_plaintext_request_to_tls_port_ends_cleanly(
    root: Path, cert_files: tuple[Path, Path]
) -> None:
    certfile, keyfile = cert_files
    cfg = make_config(root, certfile=str(certfile), keyfile=str(keyfile))
    async with running_server(cfg) as (srv, port):
        tcp = await trio.open_tcp_stream("127.0.0.1", port)
        await tcp.send_all(b"GET /hello.txt HTTP/1.1\r\nHost: t\r\n\r\n")
        received = b""
        with trio.fail_after(5):
            try:
                while chunk := await tcp.receive_some(65536):
                    received += chunk
            except trio.BrokenResourceError:
                pass  # a reset is a clean end too
        await tcp.aclose()
        await wait_until(lambda: not srv.connections)
    assert b"hello world" not in received and not received.startswith(b"HTTP/")
    assert srv.stats.conns.tls_handshake_failures == 1
    assert srv.stats.responses.completed == 0 and srv.stats.conns.cancelled == 0


async def test_tls_hello_to_plaintext_port_gets_400(root: Path) -> None:
    # A real ClientHello, produced by the ssl module into a memory BIO.
    incoming, outgoing = ssl.MemoryBIO(), ssl.MemoryBIO()
    obj = ssl.create_default_context().wrap_bio(incoming, outgoing, server_hostname="x")
    with pytest.raises(ssl.SSLWantReadError):
        obj.do_handshake()
    hello = outgoing.read()
    assert hello[:1] == b"\x16"  # TLS handshake record
    async with running_server(make_config(root)) as (srv, port):
        tcp = await trio.open_tcp_stream("127.0.0.1", port)
        await tcp.send_all(hello)
        received = b""
        with trio.fail_after(5):
            while chunk := await tcp.receive_some(65536):
                received += chunk
        await tcp.aclose()
    assert received.startswith(b"HTTP/1.1 400 ")
    assert b"Connection: close" in received
    assert srv.stats.responses.client_errors == 1


async def test_handshake_bounded_by_head_timeout(root: Path, cert_files: tuple[Path, Path]) -> None:
    certfile, keyfile = cert_files
    cfg = make_config(root, certfile=str(certfile), keyfile=str(keyfile), head_timeout=0.3)
    async with running_server(cfg) as (srv, port):
        tcp = await trio.open_tcp_stream("127.0.0.1", port)  # and never say hello
        with trio.fail_after(5):
            assert await tcp.receive_some(100) == b""
        await tcp.aclose()
    assert srv.stats.timeouts.head == 1 and srv.stats.conns.tls_handshake_failures == 0


def _encrypted_key(keyfile: Path, password: bytes) -> Path:
    key = serialization.load_pem_private_key(keyfile.read_bytes(), password=None)
    out = keyfile.with_name("enc.pem")
    out.write_bytes(
        key.private_bytes(
            serialization.Encoding.PEM,
            serialization.PrivateFormat.PKCS8,
            serialization.BestAvailableEncryption(password),
        )
    )
    return out


def test_encrypted_key_password_from_environment(
    root: Path, cert_files: tuple[Path, Path], monkeypatch: pytest.MonkeyPatch
) -> None:
    certfile, keyfile = cert_files
    enc = _encrypted_key(keyfile, b"s3cret")
    monkeypatch.setenv("TEST_KEY_PW", "s3cret")
    cfg = make_config(
        root, certfile=str(certfile), keyfile=str(enc), keyfile_password_env="TEST_KEY_PW"
    )
    assert make_ssl_context(cfg) is not None
    # Without the variable: a clear error, never a terminal prompt.
    with pytest.raises(ConfigError, match="--keyfile-password-env"):
        make_ssl_context(make_config(root, certfile=str(certfile), keyfile=str(enc)))
    monkeypatch.setenv("TEST_KEY_PW", "wrong")
    with pytest.raises(ConfigError, match="cannot load"):
        make_ssl_context(cfg)


def test_unusable_certificate_is_a_config_error(root: Path, tmp_path: Path) -> None:
    bogus = tmp_path / "bogus.pem"
    bogus.write_text("not a certificate\n")
    with pytest.raises(ConfigError, match="--certfile"):
        make_ssl_context(make_config(root, certfile=str(bogus)))
    with pytest.raises(ConfigError, match="--keyfile needs --certfile"):
        make_config(root, keyfile=str(bogus))


def _tls_files(ca: trustme.CA, d: Path, keyfile: Path) -> dict[str, Path]:
    """Certificate files that are wrong in one way each."""
    files = {"key": keyfile, "cert": d / "cert.pem"}
    files["other-key"] = d / "other-key.pem"
    ca.issue_cert("localhost").private_key_pem.write_to_path(str(files["other-key"]))
    files["text"] = d / "text.pem"
    files["text"].write_text("not a certificate\n")
    files["der"] = d / "der.crt"
    files["der"].write_bytes(ssl.PEM_cert_to_DER_cert(files["cert"].read_text()))
    files["encrypted"] = _encrypted_key(keyfile, b"s3cret")
    return files


@pytest.mark.parametrize(
    ("cert", "key", "message"),
    [
        (
            "text",
            None,
            "--certfile {text}: not a PEM certificate: no '-----BEGIN CERTIFICATE-----' line",
        ),
        (
            "der",
            "key",
            "--certfile {der}: not a PEM certificate: no '-----BEGIN CERTIFICATE-----' "
            "line (DER? 'openssl x509 -inform der' converts it)",
        ),
        ("cert", None, "--certfile {cert}: holds no private key; give it with --keyfile FILE"),
        (
            "cert",
            "text",
            "--keyfile {text}: not a PEM private key: no '-----BEGIN ... PRIVATE KEY-----' line",
        ),
        (
            "cert",
            "other-key",
            "--keyfile {other-key}: the key does not match the certificate in {cert}",
        ),
        (
            "cert",
            "encrypted",
            "--keyfile {encrypted}: cannot load the encrypted key: wrong password? ($TEST_KEY_PW)",
        ),
    ],
)
def test_a_bad_certificate_or_key_is_one_line_naming_the_file_and_the_fault(
    root: Path,
    ca: trustme.CA,
    cert_files: tuple[Path, Path],
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
    cert: str,
    key: str | None,
    message: str,
) -> None:
    """Not OpenSSL's "[SSL] PEM lib (_ssl.c:3905)" (issue 28): exit 2 and
    the file and what is wrong with it."""
    from serverio.ops.cli import main

    files = _tls_files(ca, cert_files[0].parent, cert_files[1])
    monkeypatch.setenv("TEST_KEY_PW", "wrong")
    argv = ["0", "-d", str(root), "--certfile", str(files[cert])]
    if key is not None:
        argv += ["--keyfile", str(files[key]), "--keyfile-password-env", "TEST_KEY_PW"]
    assert main(argv, environ={}) == 2
    out, err = capsys.readouterr()
    expected = message.format_map({k: str(v) for k, v in files.items()})
    assert (out, err) == ("", f"serverio: error: {expected}\n")


def test_http_server_tls_option_names(
    root: Path, cert_files: tuple[Path, Path], tmp_path: Path
) -> None:
    """CPython 3.14's --tls-cert/--tls-key/--tls-password-file work too."""
    from serverio.ops.cli import build_parser, config_from_args

    certfile, keyfile = cert_files
    enc = _encrypted_key(keyfile, b"s3cret")
    pw = tmp_path / "pw.txt"
    pw.write_text("s3cret\n")
    argv = ["-d", str(root), "--tls-cert", str(certfile), "--tls-key", str(enc)]
    cfg = config_from_args(build_parser().parse_args([*argv, "--tls-password-file", str(pw)]))
    assert (cfg.tls.certfile, cfg.tls.keyfile) == (str(certfile), str(enc))
    assert make_ssl_context(cfg) is not None
    pw.write_text("wrong\n")
    with pytest.raises(ConfigError, match="cannot load"):
        make_ssl_context(cfg)
    with pytest.raises(ConfigError, match="--tls-password-file"):
        config_from_args(build_parser().parse_args([*argv, "--tls-password-file", "/nonexistent"]))


def test_tls12_offers_aead_suites_with_ecdhe_only(
    root: Path, cert_files: tuple[Path, Path]
) -> None:
    certfile, keyfile = cert_files
    ctx = make_ssl_context(make_config(root, certfile=str(certfile), keyfile=str(keyfile)))
    assert ctx is not None
    offered = ctx.get_ciphers()
    tls12 = [c["name"] for c in offered if c["protocol"] == "TLSv1.2"]
    assert tls12 and all(c["aead"] for c in offered)
    assert all(n.startswith("ECDHE-") and ("GCM" in n or "CHACHA20" in n) for n in tls12)


# A TLS 1.2 client that offers only CBC suites (HMAC-SHA256/384) is refused;
# one that offers only an AEAD suite is served with it.
_CBC_SUITES = (
    "ECDHE-ECDSA-AES128-SHA256:ECDHE-RSA-AES128-SHA256:ECDHE-ECDSA-AES256-SHA384:"
    "ECDHE-RSA-AES256-SHA384:DHE-RSA-AES128-SHA256:DHE-RSA-AES256-SHA256"
)


@pytest.mark.parametrize(
    ("suites", "served"),
    [
        (_CBC_SUITES, False),
        ("ECDHE-ECDSA-AES128-GCM-SHA256:ECDHE-RSA-AES128-GCM-SHA256", True),
        ("ECDHE-ECDSA-CHACHA20-POLY1305:ECDHE-RSA-CHACHA20-POLY1305", True),
    ],
)
async def test_tls12_client_with_cbc_suites_only_is_refused(
    root: Path, ca: trustme.CA, cert_files: tuple[Path, Path], suites: str, served: bool
) -> None:
    certfile, keyfile = cert_files
    cfg = make_config(root, certfile=str(certfile), keyfile=str(keyfile))
    async with running_server(cfg) as (srv, port):
        ctx = client_context(ca)
        ctx.maximum_version = ssl.TLSVersion.TLSv1_2
        ctx.set_ciphers(suites)
        if not served:
            with pytest.raises(trio.BrokenResourceError):
                await tls_connect(port, ctx)
            await wait_until(lambda: srv.stats.conns.tls_handshake_failures == 1)
            return
        client = await tls_connect(port, ctx)
        assert isinstance(client.stream, trio.SSLStream)
        cipher = client.stream.cipher()
        assert cipher is not None and cipher[0] in suites.split(":")
        assert client.stream.version() == "TLSv1.2"
        assert (await client.get("/hello.txt")).status == 200
        await client.stream.aclose()


async def test_hsts_on_tls_responses_only_over_http1_and_http2(
    root: Path, ca: trustme.CA, cert_files: tuple[Path, Path]
) -> None:
    from serverio.app.server import Server

    from .h2client import H2Client

    certfile, keyfile = cert_files
    cfg = make_config(
        root,
        certfile=str(certfile),
        keyfile=str(keyfile),
        listen=("127.0.0.1:0",),
        listen_tls=("127.0.0.1:0",),
        hsts=31536000,
        hsts_include_subdomains=True,
    )
    sts = "max-age=31536000; includeSubDomains"
    srv = Server(cfg)
    async with trio.open_nursery() as nursery:
        await nursery.start(srv.serve)
        ports = {srv.tls_of(li) is not None: li.socket.getsockname()[1] for li in srv.listeners}
        # HTTPS, HTTP/1.1: on a 200, a 304 and an error alike.
        ctx = client_context(ca)
        ctx.set_alpn_protocols(["http/1.1"])
        client = await tls_connect(ports[True], ctx)
        ok = await client.get("/hello.txt")
        again = await client.get("/hello.txt", f"If-None-Match: {ok.header('etag')}\r\n")
        missing = await client.get("/nope")
        await client.stream.aclose()
        assert (ok.status, again.status, missing.status) == (200, 304, 404)
        assert [r.header("strict-transport-security") for r in (ok, again, missing)] == [sts] * 3
        # HTTPS, HTTP/2.
        ctx2 = client_context(ca)
        ctx2.set_alpn_protocols(["h2"])
        tcp = await trio.open_tcp_stream("127.0.0.1", ports[True])
        tls = trio.SSLStream(tcp, ctx2, server_hostname="127.0.0.1")
        await tls.do_handshake()
        assert tls.selected_alpn_protocol() == "h2"
        h2c = H2Client(tls)
        await h2c.start()
        r2 = await h2c.get("/hello.txt")
        await trio.aclose_forcefully(tls)
        assert r2.status == 200 and r2.headers["strict-transport-security"] == sts
        # Plain HTTP on the same server: never (RFC 6797 §7.2).
        plain = HTTPClient(await trio.open_tcp_stream("127.0.0.1", ports[False]))
        r = await plain.get("/hello.txt")
        await plain.stream.aclose()
        assert r.status == 200 and r.header("strict-transport-security") is None
        srv.shutdown()


@pytest.mark.parametrize(
    ("kw", "needle"),
    [
        ({"hsts": -1}, "--hsts must be seconds from 0"),
        ({"hsts": 60}, "--hsts needs --certfile"),
        ({"hsts_include_subdomains": True}, "--hsts-include-subdomains needs --hsts"),
    ],
)
def test_bad_hsts_settings_are_config_errors(
    root: Path, kw: dict[str, object], needle: str
) -> None:
    with pytest.raises(ConfigError, match=needle):
        make_config(root, **kw)
