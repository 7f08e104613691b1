"""A webhook reaches the public internet only: checked addresses, pinned, no redirects."""

from __future__ import annotations

import contextlib
import socket
import ssl
import threading
from datetime import UTC, datetime, timedelta

import pytest

from jobs import webhooks
from jobs.notifications import post_webhook
from tests.jobs.webhook_servers import webhook_server
from tests.portal.test_settings import run_check

REAL_GETADDRINFO = socket.getaddrinfo


@pytest.fixture(autouse=True)
def nothing_allowed(settings):
    settings.MEDBAY_WEBHOOK_ALLOW = []


class FakeDNS:
    """Names the tests invent, resolved to the addresses they give; `.invalid` never resolves."""

    def __init__(self):
        self.names: dict[str, list[str]] = {}
        self.lookups: list[str] = []

    def getaddrinfo(self, host, port, *args, **kwargs):
        if host.endswith(".invalid"):
            raise socket.gaierror(socket.EAI_NONAME, "Name or service not known")
        if host not in self.names:
            return REAL_GETADDRINFO(host, port, *args, **kwargs)
        self.lookups.append(host)
        return [
            (
                socket.AF_INET6 if ":" in ip else socket.AF_INET,
                socket.SOCK_STREAM,
                6,
                "",
                (ip, port),
            )
            for ip in self.names[host]
        ]


@pytest.fixture(autouse=True)
def dns(monkeypatch):
    fake = FakeDNS()
    monkeypatch.setattr(socket, "getaddrinfo", fake.getaddrinfo)
    return fake


def test_a_webhook_on_loopback_is_refused_and_never_reached():
    with webhook_server() as server:
        assert post_webhook(f"{server.url}/hook", "hello") is False
        assert server.seen == []


@pytest.mark.parametrize(
    ("url", "reason"),
    [
        ("http://127.0.0.1/", "loopback"),
        ("http://localhost:8000/", "loopback"),
        ("http://[::1]/", "loopback"),
        ("http://2130706433/", "loopback"),  # 127.0.0.1 written as one number
        ("http://10.1.2.3/hook", "private"),
        ("http://172.16.0.5/hook", "private"),
        ("http://192.168.1.10/hook", "private"),
        ("http://169.254.169.254/latest/meta-data/", "cloud metadata"),
        ("http://[fd00:ec2::254]/", "cloud metadata"),
        ("http://100.100.100.200/", "cloud metadata"),
        ("http://168.63.129.16/", "cloud metadata"),
        ("http://100.64.0.1/", "shared"),
        ("http://169.254.10.10/", "link-local"),
        ("http://[fe80::1]/", "link-local"),
        ("http://224.0.0.1/", "multicast"),
        ("http://0.0.0.0/", "unspecified"),
        ("http://240.0.0.1/", "private|reserved"),
        ("http://[fc00::1]/", "private"),
        ("http://[::ffff:169.254.169.254]/", "cloud metadata"),
        ("http://[64:ff9b::a9fe:a9fe]/", "cloud metadata"),  # NAT64 of 169.254.169.254
        ("http://[2002:7f00:1::]/", "loopback"),  # 6to4 of 127.0.0.1
    ],
)
def test_addresses_outside_the_public_internet_are_refused(url, reason):
    with pytest.raises(webhooks.Refused, match=reason):
        webhooks.check(url)
    result = webhooks.post_json(url, {"text": "x"})
    assert (result.delivered, result.refused) == (False, True)


def test_a_name_that_resolves_to_a_private_address_is_refused(dns):
    dns.names["hooks.example.org"] = ["93.184.216.34", "10.0.0.7"]

    with pytest.raises(webhooks.Refused, match=r"hooks.example.org resolves to 10.0.0.7"):
        webhooks.check("https://hooks.example.org/services/T/B/x")


def test_a_public_address_passes_the_check_without_connecting(dns):
    dns.names["hooks.example.org"] = ["93.184.216.34"]

    target = webhooks.check("https://hooks.example.org/services/T0/B0/secret?x=1")

    assert (target.host, target.port, target.address) == ("hooks.example.org", 443, "93.184.216.34")
    assert target.path == "/services/T0/B0/secret?x=1"
    assert target.shown == "https://hooks.example.org/…"


@pytest.mark.parametrize(
    ("url", "message"),
    [
        ("ftp://hooks.example.org/x", "Only http:// and https://"),
        ("file:///etc/passwd", "Only http:// and https://"),
        ("gopher://127.0.0.1:6379/_FLUSHALL", "Only http:// and https://"),
        ("javascript:alert(1)", "Only http:// and https://"),
        ("hooks.example.org/x", "Only http:// and https://"),
        ("http://", "no host name"),
        ("http://[::1", "not a web address"),
        ("http://example.org:99999/", "not a web address"),
        ("http://user:pw@example.org/", "user name and password"),
        ("http://exa mple.org/", "no spaces"),
        ("http://no-such-host.invalid/", "does not resolve"),
    ],
)
def test_junk_and_other_schemes_are_refused_with_a_reason(url, message):
    with pytest.raises(webhooks.Refused, match=message):
        webhooks.check(url)


def test_a_redirect_is_not_followed(settings):
    settings.MEDBAY_WEBHOOK_ALLOW = ["127.0.0.1"]
    location = "http://127.0.0.1:{port}/latest/meta-data/iam/security-credentials/"
    with webhook_server(status=302, location=location) as server:
        result = webhooks.post_json(f"{server.url}/hook", {"text": "hello"})
        assert post_webhook(f"{server.url}/hook", "hello") is False

    assert [(seen.method, seen.path) for seen in server.seen] == [("POST", "/hook")] * 2
    assert (result.delivered, result.refused, result.status) == (False, False, 302)
    assert "redirect" in result.error and "not followed" in result.error


def test_the_allow_setting_lets_an_address_through(settings):
    with webhook_server() as server:
        assert post_webhook(f"{server.url}/hook", "refused") is False
        settings.MEDBAY_WEBHOOK_ALLOW = ["127.0.0.1"]
        assert post_webhook(f"{server.url}/hook", "by address") is True
        settings.MEDBAY_WEBHOOK_ALLOW = ["10.0.0.0/8", "127.0.0.0/8"]
        assert post_webhook(f"{server.url}/hook", "by network") is True

    assert [seen.body for seen in server.seen] == [{"text": "by address"}, {"text": "by network"}]


def test_an_allowed_host_name_is_reached_at_the_address_checked_with_its_own_name(settings, dns):
    """The name resolves once; the connection goes to that address, Host stays the name."""
    settings.MEDBAY_WEBHOOK_ALLOW = ["hooks.internal.test"]
    dns.names["hooks.internal.test"] = ["127.0.0.1"]
    with webhook_server() as server:
        result = webhooks.post_json(f"http://hooks.internal.test:{server.port}/h", {"text": "hi"})

    assert result.delivered, result.error
    [seen] = server.seen
    assert seen.host == f"hooks.internal.test:{server.port}"
    assert dns.lookups == ["hooks.internal.test"]


def test_an_allowed_host_name_does_not_allow_other_names_on_its_address(settings, dns):
    settings.MEDBAY_WEBHOOK_ALLOW = ["hooks.internal.test"]
    dns.names["other.internal.test"] = ["127.0.0.1"]

    with pytest.raises(webhooks.Refused, match="loopback"):
        webhooks.check("http://other.internal.test/")


def test_https_is_pinned_too_and_names_the_host_to_tls(settings, dns, tmp_path):
    """SNI carries the name; the certificate must be valid for it (self-signed is not)."""
    pytest.importorskip("cryptography")
    settings.MEDBAY_WEBHOOK_ALLOW = ["hooks.internal.test"]
    dns.names["hooks.internal.test"] = ["127.0.0.1"]
    server_names: list[str | None] = []
    context = _self_signed_context(tmp_path, "hooks.internal.test")
    context.sni_callback = lambda sock, name, ctx: server_names.append(name)
    listener = socket.create_server(("127.0.0.1", 0))
    port = listener.getsockname()[1]

    def accept_one():
        conn, _ = listener.accept()
        # The client refuses the certificate and hangs up.
        with contextlib.suppress(ssl.SSLError, OSError):
            context.wrap_socket(conn, server_side=True).close()

    thread = threading.Thread(target=accept_one, daemon=True)
    thread.start()
    result = webhooks.post_json(f"https://hooks.internal.test:{port}/h", {"text": "hi"})
    thread.join(5)
    listener.close()

    assert server_names == ["hooks.internal.test"]
    assert not result.delivered and "certificate" in result.error


def test_a_bad_allow_setting_stops_start_up_naming_the_setting():
    result = run_check(DEBUG="true", MEDBAY_WEBHOOK_ALLOW="127.0.0.1,http://hooks.example")

    assert result.returncode != 0
    assert "MEDBAY_WEBHOOK_ALLOW" in result.stderr and "'http://hooks.example'" in result.stderr


def test_a_good_allow_setting_starts():
    allow = "10.20.0.0/16, 127.0.0.1,::1,hooks.corp.example,relay1"
    assert run_check(DEBUG="true", MEDBAY_WEBHOOK_ALLOW=allow).returncode == 0


def _self_signed_context(folder, name: str) -> ssl.SSLContext:
    from cryptography import x509
    from cryptography.hazmat.primitives import hashes, serialization
    from cryptography.hazmat.primitives.asymmetric import ec
    from cryptography.x509.oid import NameOID

    key = ec.generate_private_key(ec.SECP256R1())
    subject = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, name)])
    now = datetime.now(UTC)
    cert = (
        x509.CertificateBuilder()
        .subject_name(subject)
        .issuer_name(subject)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - timedelta(minutes=1))
        .not_valid_after(now + timedelta(hours=1))
        .add_extension(x509.SubjectAlternativeName([x509.DNSName(name)]), critical=False)
        .sign(key, hashes.SHA256())
    )
    cert_file, key_file = folder / "cert.pem", folder / "key.pem"
    cert_file.write_bytes(cert.public_bytes(serialization.Encoding.PEM))
    key_file.write_bytes(
        key.private_bytes(
            serialization.Encoding.PEM,
            serialization.PrivateFormat.PKCS8,
            serialization.NoEncryption(),
        )
    )
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    context.load_cert_chain(cert_file, key_file)
    return context
