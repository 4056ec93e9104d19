"""``--dev-tls``: a local CA and a leaf certificate for development HTTPS.

On first use a CA is made once (EC P-256 key, self-signed, 10 years,
basicConstraints CA:TRUE pathlen 0, keyUsage keyCertSign/cRLSign, and name
constraints, RFC 5280 §4.2.1.10, so that a stolen CA key can sign for
nothing but local names: the DNS subtrees in :data:`PERMITTED_DNS` plus the
machine's hostname at CA creation, and the loopback and private address
ranges in :data:`PERMITTED_IPS`).  A leaf (EC P-256, serverAuth, at most
:data:`LEAF_DAYS` days, under the CA/Browser Forum's 398) names localhost,
127.0.0.1, ::1, the hostname and the LAN addresses of ``ops/lan.py``; it is
re-issued when expired, within :data:`RENEW_DAYS` of expiry, when the set
of names changed, or when it was not signed by the CA on disk.

Files live in :func:`default_dir` (or ``--dev-tls-dir`` /
``SERVERIO_DEV_TLS_DIR``).  Keys are created 0600 with O_CREAT|O_EXCL into
a temporary name, then renamed over the old one (atomic: a reader sees the
old file or the new one, never half of one).  On POSIX a key file that
group or others can access is refused.

The ``cryptography`` package is an optional extra (``serverio[dev-tls]``;
docs/architecture.md "Optional dependencies" says why).
"""

from __future__ import annotations

import datetime as dt
import ipaddress
import os
import socket
import sys
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

from ..config import Config
from ..errors import ConfigError
from ..secret import data_dir
from ..site.service import served_inside
from .lan import interface_addresses

if TYPE_CHECKING:
    from cryptography import x509

__all__ = [
    "CA_DAYS",
    "LEAF_DAYS",
    "PERMITTED_DNS",
    "PERMITTED_IPS",
    "RENEW_DAYS",
    "DevTls",
    "apply_dev_tls",
    "check_key_mode",
    "default_dir",
    "ensure_dev_tls",
    "local_names",
    "trust_instructions",
]

CA_DAYS = 3650
LEAF_DAYS = 397  # CA/Browser Forum: at most 398 days for a TLS leaf
RENEW_DAYS = 30
# DNS subtrees (RFC 5280 §4.2.1.10: "localhost" permits localhost and every
# name below it, RFC 6761 §6.3); .local is mDNS (RFC 6762), home.arpa the
# home network (RFC 8375), .internal the private-use TLD (ICANN, 2024), .lan
# what many routers hand out.
PERMITTED_DNS = ("localhost", "local", "home.arpa", "internal", "lan")
# Loopback, private (RFC 1918, RFC 4193), shared CGNAT (RFC 6598, e.g. VPN
# overlays) and link-local ranges.
PERMITTED_IPS = (
    "127.0.0.0/8",
    "10.0.0.0/8",
    "172.16.0.0/12",
    "192.168.0.0/16",
    "100.64.0.0/10",
    "169.254.0.0/16",
    "::1/128",
    "fc00::/7",
    "fe80::/10",
)
CA_CERT, CA_KEY, LEAF_CERT, LEAF_KEY = "ca.pem", "ca-key.pem", "cert.pem", "key.pem"

Clock = Callable[[], dt.datetime]


@dataclass(frozen=True, slots=True)
class DevTls:
    """Where the files are, and what this start did."""

    directory: str
    ca_file: str
    certfile: str
    keyfile: str
    created_ca: bool
    issued_leaf: bool


def default_dir(environ: dict[str, str] | None = None, platform: str = sys.platform) -> str:
    """The user's data directory for serverio's development TLS files."""
    return os.path.join(data_dir(environ, platform), "dev-tls")


def _private_ip(text: str) -> ipaddress.IPv4Address | ipaddress.IPv6Address | None:
    try:
        ip = ipaddress.ip_address(text.split("%", 1)[0])
    except ValueError:
        return None
    nets = (ipaddress.ip_network(n) for n in PERMITTED_IPS)
    return ip if any(ip.version == n.version and ip in n for n in nets) else None


def local_names(
    hostname: str | None = None, addresses: Sequence[str] | None = None
) -> tuple[list[str], list[str]]:
    """(DNS names, IP addresses) for the leaf: localhost, the hostname,
    127.0.0.1, ::1 and the LAN addresses (those in :data:`PERMITTED_IPS`:
    the CA may not sign for any other)."""
    host = (socket.gethostname() if hostname is None else hostname).strip().lower().rstrip(".")
    dns = ["localhost"]
    if host and host != "localhost" and all(c.isalnum() or c in "-." for c in host):
        dns.append(host)
    ips = ["127.0.0.1", "::1"]
    for a in interface_addresses() if addresses is None else addresses:
        ip = _private_ip(a)
        if ip is not None and str(ip) not in ips:
            ips.append(str(ip))
    return dns, ips


def _crypto_missing() -> ConfigError:
    return ConfigError(
        "--dev-tls needs the 'cryptography' package: pip install 'serverio[dev-tls]'"
    )


def _write(path: str, data: bytes, mode: int) -> None:
    """Write ``data`` to ``path`` atomically, created with ``mode``."""
    tmp = f"{path}.{os.getpid()}.tmp"
    try:
        os.unlink(tmp)  # a leftover of a crashed start
    except FileNotFoundError:
        pass
    flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | getattr(os, "O_BINARY", 0)
    fd = os.open(tmp, flags, mode)
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(data)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        try:
            os.unlink(tmp)
        except OSError:
            pass
        raise


def check_key_mode(path: str) -> None:
    """Refuse (ConfigError) a key file that group or others may access (POSIX)."""
    if os.name != "posix":
        return
    mode = os.stat(path).st_mode
    if mode & 0o077:
        raise ConfigError(
            f"--dev-tls: {path} is accessible by group or others "
            f"(mode {mode & 0o777:o}); chmod 600 it"
        )


def _load(directory: str, cert: str, key: str) -> tuple[x509.Certificate, object] | None:
    from cryptography import x509
    from cryptography.hazmat.primitives.serialization import load_pem_private_key

    cert_path, key_path = os.path.join(directory, cert), os.path.join(directory, key)
    if not (os.path.exists(cert_path) and os.path.exists(key_path)):
        return None
    check_key_mode(key_path)
    try:
        with open(cert_path, "rb") as f:
            c = x509.load_pem_x509_certificate(f.read())
        with open(key_path, "rb") as f:
            k = load_pem_private_key(f.read(), password=None)
    except (OSError, ValueError):
        return None  # unreadable or damaged: made anew
    return c, k


def _user() -> str:
    try:
        import getpass

        return getpass.getuser()
    except (OSError, KeyError, ImportError):
        return "user"


def _make_ca(directory: str, now: dt.datetime, hostname: str) -> None:
    from cryptography import x509
    from cryptography.hazmat.primitives import hashes, serialization
    from cryptography.hazmat.primitives.asymmetric import ec
    from cryptography.x509.oid import NameOID

    key = ec.generate_private_key(ec.SECP256R1())
    name = x509.Name(
        [
            x509.NameAttribute(NameOID.ORGANIZATION_NAME, "serverio"),
            x509.NameAttribute(
                NameOID.COMMON_NAME, f"serverio development CA ({_user()}@{hostname})"[:64]
            ),
        ]
    )
    dns = list(PERMITTED_DNS)
    if hostname and all(c.isalnum() or c in "-." for c in hostname) and hostname not in dns:
        dns.append(hostname)
    permitted: list[x509.GeneralName] = [x509.DNSName(d) for d in dns]
    permitted += [x509.IPAddress(ipaddress.ip_network(n)) for n in PERMITTED_IPS]
    ski = x509.SubjectKeyIdentifier.from_public_key(key.public_key())
    cert = (
        x509.CertificateBuilder()
        .subject_name(name)
        .issuer_name(name)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - dt.timedelta(days=1))
        .not_valid_after(now + dt.timedelta(days=CA_DAYS))
        .add_extension(x509.BasicConstraints(ca=True, path_length=0), critical=True)
        .add_extension(
            x509.KeyUsage(
                digital_signature=False,
                content_commitment=False,
                key_encipherment=False,
                data_encipherment=False,
                key_agreement=False,
                key_cert_sign=True,
                crl_sign=True,
                encipher_only=False,
                decipher_only=False,
            ),
            critical=True,
        )
        .add_extension(x509.NameConstraints(permitted, None), critical=True)
        .add_extension(ski, critical=False)
        .sign(key, hashes.SHA256())
    )
    pem_key = key.private_bytes(
        serialization.Encoding.PEM,
        serialization.PrivateFormat.PKCS8,
        serialization.NoEncryption(),
    )
    _write(os.path.join(directory, CA_KEY), pem_key, 0o600)
    _write(os.path.join(directory, CA_CERT), cert.public_bytes(serialization.Encoding.PEM), 0o644)


def _permitted_dns(ca: x509.Certificate) -> list[str]:
    from cryptography import x509

    try:
        nc = ca.extensions.get_extension_for_class(x509.NameConstraints).value
    except x509.ExtensionNotFound:
        return []
    return [n.value for n in nc.permitted_subtrees or () if isinstance(n, x509.DNSName)]


def _allowed(name: str, subtrees: Sequence[str]) -> bool:
    return any(name == s or name.endswith("." + s) for s in subtrees)


def _names_of(cert: x509.Certificate) -> tuple[set[str], set[str]]:
    from cryptography import x509

    try:
        san = cert.extensions.get_extension_for_class(x509.SubjectAlternativeName).value
    except x509.ExtensionNotFound:
        return set(), set()
    dns = set(san.get_values_for_type(x509.DNSName))
    ips = {str(ip) for ip in san.get_values_for_type(x509.IPAddress)}
    return dns, ips


def _leaf_ok(
    leaf: x509.Certificate,
    ca: x509.Certificate,
    want: tuple[set[str], set[str]],
    now: dt.datetime,
) -> bool:
    if leaf.issuer != ca.subject:
        return False
    try:
        leaf.verify_directly_issued_by(ca)
    except (ValueError, TypeError, Exception):  # InvalidSignature is an Exception
        return False
    if leaf.not_valid_after_utc - now < dt.timedelta(days=RENEW_DAYS):
        return False
    return _names_of(leaf) == want


def _issue_leaf(
    directory: str,
    ca: x509.Certificate,
    ca_key: object,
    dns: Sequence[str],
    ips: Sequence[str],
    now: dt.datetime,
) -> None:
    from cryptography import x509
    from cryptography.hazmat.primitives import hashes, serialization
    from cryptography.hazmat.primitives.asymmetric import ec
    from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

    assert isinstance(ca_key, ec.EllipticCurvePrivateKey)
    key = ec.generate_private_key(ec.SECP256R1())
    sans: list[x509.GeneralName] = [x509.DNSName(d) for d in dns]
    sans += [x509.IPAddress(ipaddress.ip_address(i)) for i in ips]
    cert = (
        x509.CertificateBuilder()
        .subject_name(x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "localhost")]))
        .issuer_name(ca.subject)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - dt.timedelta(hours=1))
        .not_valid_after(now + dt.timedelta(days=LEAF_DAYS))
        .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
        .add_extension(x509.SubjectAlternativeName(sans), critical=False)
        .add_extension(x509.ExtendedKeyUsage([ExtendedKeyUsageOID.SERVER_AUTH]), critical=False)
        .add_extension(
            x509.AuthorityKeyIdentifier.from_issuer_public_key(ca_key.public_key()),
            critical=False,
        )
        .sign(ca_key, hashes.SHA256())
    )
    pem_key = key.private_bytes(
        serialization.Encoding.PEM,
        serialization.PrivateFormat.PKCS8,
        serialization.NoEncryption(),
    )
    _write(os.path.join(directory, LEAF_KEY), pem_key, 0o600)
    _write(os.path.join(directory, LEAF_CERT), cert.public_bytes(serialization.Encoding.PEM), 0o644)


def ensure_dev_tls(
    directory: str,
    names: tuple[list[str], list[str]] | None = None,
    clock: Clock | None = None,
) -> DevTls:
    """Make the CA (once) and a current leaf in ``directory``; their paths.

    ``names``: (DNS names, IPs) for the leaf (default: :func:`local_names`);
    ``clock``: now, timezone-aware (tests inject one).  Raises
    :class:`ConfigError` (one line) without ``cryptography``, for a key file
    others may read, or when the directory cannot be written.

    Cancellation handling: blocking (key generation, small file writes,
    fsync); called once at start-up before the event loop runs.
    """
    try:
        import cryptography  # noqa: F401
    except ImportError:
        raise _crypto_missing() from None
    now = (clock or (lambda: dt.datetime.now(dt.UTC)))()
    hostname = socket.gethostname().strip().lower().rstrip(".")
    dns, ips = local_names() if names is None else names
    try:
        os.makedirs(directory, mode=0o700, exist_ok=True)
        created = False
        loaded = _load(directory, CA_CERT, CA_KEY)
        if loaded is None or loaded[0].not_valid_after_utc - now < dt.timedelta(days=RENEW_DAYS):
            _make_ca(directory, now, hostname)
            created = True
            loaded = _load(directory, CA_CERT, CA_KEY)
            assert loaded is not None
        ca, ca_key = loaded
        subtrees = _permitted_dns(ca)
        dns = [d for d in dns if _allowed(d, subtrees)]  # the CA may sign for no other
        leaf = _load(directory, LEAF_CERT, LEAF_KEY)
        issued = leaf is None or not _leaf_ok(leaf[0], ca, (set(dns), set(ips)), now)
        if issued:
            _issue_leaf(directory, ca, ca_key, dns, ips, now)
    except OSError as exc:
        raise ConfigError(f"--dev-tls: {directory}: {exc.strerror or exc}") from None
    return DevTls(
        directory=directory,
        ca_file=os.path.join(directory, CA_CERT),
        certfile=os.path.join(directory, LEAF_CERT),
        keyfile=os.path.join(directory, LEAF_KEY),
        created_ca=created,
        issued_leaf=issued,
    )


def trust_instructions(ca_file: str) -> str:
    """How to make browsers and tools trust the CA (printed on stderr)."""
    q = f"'{ca_file}'"
    return "\n".join(
        [
            f"serverio: --dev-tls: development CA at {ca_file}; to trust it:",
            f"  Debian/Ubuntu: sudo cp {q} /usr/local/share/ca-certificates/serverio-dev.crt"
            " && sudo update-ca-certificates",
            f"  Fedora/RHEL:   sudo trust anchor {q}",
            "  macOS:         sudo security add-trusted-cert -d -r trustRoot"
            f" -k /Library/Keychains/System.keychain {q}",
            f"  Windows:       certutil -addstore -user Root {q}",
            "  Firefox/Chromium (NSS): certutil -d sql:$HOME/.pki/nssdb -A -t C,,"
            f" -n 'serverio development CA' -i {q}",
        ]
    )


def apply_dev_tls(cfg: Config, clock: Clock | None = None) -> Config:
    """``cfg`` serving the --dev-tls leaf (unchanged without --dev-tls);
    says on stderr where the CA is and how to trust it, and warns that
    --hsts pins every development server on localhost.  ConfigError when
    the directory lies inside the served root or a mount (the CA key
    would be served).

    Cancellation handling: blocking, like :func:`ensure_dev_tls`; called at
    start-up before the event loop runs.
    """
    tls = cfg.tls
    if not tls.dev_tls:
        return cfg
    directory = tls.dev_tls_dir or default_dir()
    if served_inside(cfg, directory):
        # The CA's private key would be one GET away (``-d ~ --hidden``):
        # refused before anything is made there, whatever --hidden says.
        raise ConfigError(
            f"--dev-tls: its directory {directory} (the CA's private key) is inside the "
            "served root or a --mount; serve another directory or set --dev-tls-dir elsewhere"
        )
    made = ensure_dev_tls(directory, clock=clock)
    check_key_mode(made.keyfile)
    check_key_mode(os.path.join(made.directory, CA_KEY))
    if made.created_ca:
        print(trust_instructions(made.ca_file), file=sys.stderr, flush=True)
    else:
        print(
            f"serverio: --dev-tls: certificate {made.certfile} (CA {made.ca_file})",
            file=sys.stderr,
            flush=True,
        )
    if tls.hsts is not None:
        # RFC 6797 §8.1: a browser then refuses plain HTTP on this host
        # (localhost: every other development server) for max-age seconds.
        print(
            "serverio: warning: --hsts with --dev-tls: browsers will insist on HTTPS for "
            "this host name (localhost too) until max-age runs out",
            file=sys.stderr,
            flush=True,
        )
    return cfg.evolve(certfile=made.certfile, keyfile=made.keyfile)
