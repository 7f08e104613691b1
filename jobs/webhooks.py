"""Posting to a person's webhook without letting the address reach inside the site.

Whoever saves a webhook address makes Medbay send a request from inside the
network to it (SSRF): a cloud metadata service, a database's HTTP port, an
admin page bound to loopback. So an address is resolved once, and every IP the
name resolves to must be on the public internet or on the site's
MEDBAY_WEBHOOK_ALLOW list; the connection then goes to the IP that was checked,
with the Host header and TLS server name still the URL's host: resolving again
to connect would let a name answer a public IP to the check and 127.0.0.1 to
the connection (DNS rebinding). Redirects are never followed (a 302 to
http://169.254.169.254/ would undo every check), no proxy from the environment
is used (urllib would), and each step has a short timeout.
"""

from __future__ import annotations

import http.client
import ipaddress
import json
import socket
import ssl
import string
from dataclasses import dataclass
from urllib.parse import quote, urlsplit

from django.conf import settings

SCHEMES = {"http": 80, "https": 443}
MAX_URL_LENGTH = 1000
CONNECT_TIMEOUT_S = 3.0
READ_TIMEOUT_S = 5.0  # each read; the answer's body is not read beyond its first bytes
MAX_BODY_BYTES = 1024

# Cloud metadata services, named in refusals. Most sit in ranges refused anyway;
# Azure's wire server is a public address that only answers from inside Azure.
METADATA = [
    ipaddress.ip_network(net)
    for net in ("169.254.169.254/32", "fd00:ec2::254/128", "100.100.100.200/32", "168.63.129.16/32")
]
SHARED = ipaddress.ip_network("100.64.0.0/10")  # carrier-grade NAT, often a provider's inside
NAT64 = ipaddress.ip_network("64:ff9b::/96")  # a gateway forwards to the IPv4 address inside
PATH_SAFE = string.punctuation.replace("#", "")


class Refused(ValueError):
    """Medbay will not post to this address; the message says why, for the person."""


class Unresolved(Refused):
    """The host name has no address now (perhaps only for now: DNS can fail)."""


@dataclass(frozen=True)
class Target:
    """A checked webhook: where to connect (ADDRESS) and what to call it (HOST)."""

    scheme: str
    host: str
    port: int
    path: str
    address: str

    @property
    def shown(self) -> str:
        return shown_destination(self.scheme, self.host, self.port)


@dataclass(frozen=True)
class Result:
    """How one POST went: REFUSED before connecting, else the status or the error."""

    delivered: bool
    status: int | None = None
    error: str = ""
    refused: bool = False


def shown_destination(scheme: str, host: str, port: int | None) -> str:
    """scheme://host[:port]/…: Slack's and Teams' paths are the webhook's secret."""
    name = f"[{host}]" if ":" in host else host
    default = SCHEMES.get(scheme)
    return f"{scheme}://{name}{'' if port in (None, default) else f':{port}'}/…"


def describe(url: str) -> str:
    """The address as shown in delivery rows, for any text (a refused one too)."""
    try:
        parts = urlsplit(url.strip())
        port = parts.port
    except ValueError:
        return "(not a web address)"
    if parts.scheme.lower() not in SCHEMES or not parts.hostname:
        return "(not a web address)"
    return shown_destination(parts.scheme.lower(), parts.hostname, port)


def check(url: str) -> Target:
    """The Target for URL, or Refused with a message fit for the person's form."""
    scheme, host, port, path = _split(url)
    addresses = _resolve(host, port)
    for address in addresses:
        reason = _refusal(address, host)
        if reason:
            said = host if host == str(address) else f"{host} resolves to {address}, which"
            raise Refused(
                f"{said} is {reason}: webhooks may only reach the public internet,"
                " unless your site's administrators allow the address."
            )
    return Target(scheme, host, port, path, str(addresses[0]))


def post_json(url: str, payload: dict) -> Result:
    """POST PAYLOAD as JSON to URL if `check` allows it; never raises for the network."""
    try:
        target = check(url)
    except Unresolved as error:
        return Result(False, error=str(error))
    except Refused as error:
        return Result(False, error=str(error), refused=True)
    body = json.dumps(payload).encode()
    headers = {"Content-Type": "application/json", "User-Agent": "Medbay"}
    connection = _connection(target)
    try:
        connection.request("POST", target.path, body=body, headers=headers)
        response = connection.getresponse()
        response.read(MAX_BODY_BYTES)
        status = response.status
        location = response.getheader("Location", "")
    except (OSError, http.client.HTTPException, ValueError) as error:
        return Result(False, error=_explain(error))
    finally:
        connection.close()
    if 300 <= status < 400:
        where = describe(location)
        where = "" if where.startswith("(") else f" to {where}"
        return Result(False, status, f"answered {status}, a redirect{where}: not followed")
    if not 200 <= status < 300:
        return Result(False, status, f"answered {status}")
    return Result(True, status)


def _split(url: str) -> tuple[str, str, int, str]:
    url = url.strip()
    if len(url) > MAX_URL_LENGTH:
        raise Refused(f"That address is longer than {MAX_URL_LENGTH} characters.")
    if any(char.isspace() or not char.isprintable() for char in url):
        raise Refused("A web address has no spaces or control characters.")
    try:
        parts = urlsplit(url)
        port = parts.port
    except ValueError:
        raise Refused("That is not a web address (its port or host is not valid).") from None
    scheme = parts.scheme.lower()
    if scheme not in SCHEMES:
        raise Refused("Only http:// and https:// addresses can be webhooks.")
    if not parts.hostname:
        raise Refused("That address has no host name.")
    if parts.username is not None or parts.password is not None:
        raise Refused("Leave the user name and password out of the address.")
    path = quote(parts.path or "/", safe=PATH_SAFE)
    if parts.query:
        path += "?" + quote(parts.query, safe=PATH_SAFE)
    return scheme, parts.hostname, port or SCHEMES[scheme], path


def _resolve(host: str, port: int) -> list:
    try:
        found = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM)
    except (OSError, UnicodeError):
        raise Unresolved(f"{host} does not resolve to an address.") from None
    addresses = []
    for *_, sockaddr in found:
        address = _plain(ipaddress.ip_address(sockaddr[0].split("%", 1)[0]))
        if address not in addresses:
            addresses.append(address)
    if not addresses:
        raise Unresolved(f"{host} does not resolve to an address.")
    return addresses


def _plain(address):
    """An IPv4-mapped IPv6 address (::ffff:127.0.0.1) as the IPv4 address it reaches."""
    if address.version == 6 and address.ipv4_mapped is not None:
        return address.ipv4_mapped
    return address


def _refusal(address, host: str) -> str | None:
    """Why ADDRESS may not be posted to, or None (public, or allowed by the site)."""
    if _site_allows(address, host):
        return None
    for inner in _embedded_ipv4(address):
        reason = _not_public(inner)
        if reason:
            return f"{reason} (inside {address})"
    return _not_public(address)


def _not_public(address) -> str | None:
    if any(address in network for network in METADATA):
        return "a cloud metadata address"
    for test, reason in (
        ("is_loopback", "a loopback address"),
        ("is_link_local", "a link-local address"),
        ("is_multicast", "a multicast address"),
        ("is_unspecified", "an unspecified address"),
    ):
        if getattr(address, test):
            return reason
    if address in SHARED:
        return "a shared (carrier-grade NAT) address"
    if address.is_private:
        return "a private address"
    if address.is_reserved or not address.is_global:
        return "a reserved address"
    return None


def _embedded_ipv4(address) -> list:
    """IPv4 addresses that 6to4, Teredo or NAT64 gateways would forward ADDRESS to."""
    if address.version != 6:
        return []
    inner = [address.sixtofour, *(address.teredo or ())]
    if address in NAT64:
        inner.append(ipaddress.IPv4Address(int(address) & 0xFFFFFFFF))
    return [found for found in inner if found is not None]


def _site_allows(address, host: str) -> bool:
    name = host.rstrip(".").lower()
    for entry in settings.MEDBAY_WEBHOOK_ALLOW:
        try:
            network = ipaddress.ip_network(entry, strict=False)
        except ValueError:
            if entry.rstrip(".").lower() == name:
                return True
            continue
        if address.version == network.version and address in network:
            return True
    return False


def _connection(target: Target) -> http.client.HTTPConnection:
    if target.scheme == "https":
        return _PinnedHTTPS(target)
    return _PinnedHTTP(target)


def _open(target: Target) -> socket.socket:
    sock = socket.create_connection((target.address, target.port), timeout=CONNECT_TIMEOUT_S)
    sock.settimeout(READ_TIMEOUT_S)
    return sock


class _PinnedHTTP(http.client.HTTPConnection):
    """Names the URL's host in the Host header; connects to the address that was checked."""

    def __init__(self, target: Target):
        super().__init__(target.host, target.port, timeout=CONNECT_TIMEOUT_S)
        self.target = target

    def connect(self):
        self.sock = _open(self.target)


class _PinnedHTTPS(http.client.HTTPSConnection):
    """As _PinnedHTTP, and the certificate must name the URL's host (SNI too)."""

    def __init__(self, target: Target):
        self.tls = ssl.create_default_context()
        super().__init__(target.host, target.port, timeout=CONNECT_TIMEOUT_S, context=self.tls)
        self.target = target

    def connect(self):
        self.sock = self.tls.wrap_socket(_open(self.target), server_hostname=self.target.host)


def _explain(error: Exception) -> str:
    if isinstance(error, ssl.SSLCertVerificationError):
        return f"its TLS certificate was refused: {error.verify_message}"
    if isinstance(error, TimeoutError):
        return "no answer in time"
    if isinstance(error, ConnectionRefusedError):
        return "connection refused"
    text = str(error) or type(error).__name__
    return text[:300]
