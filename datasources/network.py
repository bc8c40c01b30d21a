"""Which network addresses a data source may connect to.

A data source names a host; River connects to it from inside the operator's network,
so an unchecked host would let any workspace reach River's own database and broker,
cloud metadata endpoints or private services, and use error messages to map them.
The rules, in order:

1. The host must be an IP address or a DNS name: no socket paths, no lists, no
   ports or credentials smuggled into the name.
2. Names are resolved here and every address they resolve to is checked; the
   connector then connects to the checked address (``hostaddr``), never resolving
   the name again, so a DNS answer that changes between check and connect (DNS
   rebinding) cannot move the connection.
3. River's own database, cache, broker and channel layer endpoints are refused
   always, whatever ``RIVER_DATA_SOURCE_ALLOWED_HOSTS`` says. A loopback endpoint of
   River's stands for every loopback address on that port.
4. Unspecified, multicast and broadcast addresses are refused always.
5. Otherwise an address passes when the allow-list admits it: ``public`` admits any
   globally routable address; an IP or CIDR entry admits the addresses it covers; a
   name entry admits that exact name. Loopback, private and link-local addresses pass
   only through an IP, CIDR or name entry.

IPv4 spellings that resolvers accept (``2130706433``, ``0x7f.1``, ``0177.0.0.1``,
``127.1``) are parsed here to the address they mean, without a DNS query; IPv6 forms
that carry an IPv4 address (``::ffff:10.0.0.1``, 6to4, NAT64) are judged by the IPv4
address inside.
"""

from __future__ import annotations

import ipaddress
import re
import socket
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from urllib.parse import urlparse

from django.conf import settings

IPAddress = ipaddress.IPv4Address | ipaddress.IPv6Address
Resolver = Callable[[str, int], list[str]]

PUBLIC = "public"
_LABEL = r"[A-Za-z0-9_]([A-Za-z0-9_-]{0,61}[A-Za-z0-9])?"
_HOSTNAME = re.compile(rf"^(?=.{{1,253}}$){_LABEL}(\.{_LABEL})*\.?$")
_NAT64 = ipaddress.ip_network("64:ff9b::/96")
_IPV4_COMPATIBLE = ipaddress.ip_network("::/96")  # deprecated ::a.b.c.d
_ALWAYS_REFUSED = (
    ipaddress.ip_network("0.0.0.0/8"),
    ipaddress.ip_network("255.255.255.255/32"),
    ipaddress.ip_network("::/128"),
)


class HostNotAllowed(Exception):
    """The host may not be used as a data source; ``message`` is safe to show."""

    def __init__(self, message: str):
        super().__init__(message)
        self.message = message


@dataclass(frozen=True)
class CheckedHost:
    """A host that passed the policy and the address to connect to."""

    host: str
    address: str
    port: int


def _system_resolver(host: str, port: int) -> list[str]:
    try:
        infos = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM)
    except (OSError, UnicodeError):
        return []
    return [info[4][0] for info in infos]


# Tests replace this to make names resolve to chosen addresses without DNS.
resolver: Resolver = _system_resolver


def _inet_aton_part(text: str) -> int:
    if re.fullmatch(r"0[xX][0-9a-fA-F]*", text):
        return int(text[2:] or "0", 16)
    if re.fullmatch(r"0[0-7]+", text):
        return int(text, 8)
    if re.fullmatch(r"[0-9]+", text):
        return int(text, 10)
    raise ValueError(text)


def ipv4_parse_loose(text: str) -> ipaddress.IPv4Address | None:
    """The IPv4 address ``text`` means to ``inet_aton`` (1 to 4 parts, each decimal,
    octal with a leading 0 or hex with 0x), or None when it is not such a spelling."""
    parts = text.split(".")
    if text.endswith("."):
        parts = parts[:-1]
    if not 1 <= len(parts) <= 4 or any(p == "" for p in parts):
        return None
    try:
        values = [_inet_aton_part(p) for p in parts]
    except ValueError:
        return None
    *head, last = values
    if any(v > 255 for v in head) or last >= 256 ** (4 - len(head)):
        return None
    number = 0
    for value in head:
        number = number * 256 + value
    number = number * 256 ** (4 - len(head)) + last
    return ipaddress.IPv4Address(number)


def ip_literal(host: str) -> IPAddress | None:
    text = host[1:-1] if host.startswith("[") and host.endswith("]") else host
    if ":" in text:
        try:
            address = ipaddress.IPv6Address(text)
        except ValueError:
            return None
        return None if address.scope_id else address
    return ipv4_parse_loose(text)


def embedded_ipv4(address: IPAddress) -> ipaddress.IPv4Address | None:
    """The IPv4 address an IPv6 address stands for (mapped, compatible, 6to4, NAT64), if any."""
    if isinstance(address, ipaddress.IPv4Address):
        return None
    if address.ipv4_mapped is not None:
        return address.ipv4_mapped
    if address.sixtofour is not None:
        return address.sixtofour
    if address in _NAT64 or (address in _IPV4_COMPATIBLE and int(address) > 1):
        return ipaddress.IPv4Address(int(address) & 0xFFFFFFFF)
    return None


def _effective(address: IPAddress) -> IPAddress:
    return embedded_ipv4(address) or address


def _is_public(address: IPAddress) -> bool:
    if isinstance(address, ipaddress.IPv6Address) and address.teredo is not None:
        return False
    return address.is_global and not address.is_multicast


def _is_loopback(address: IPAddress) -> bool:
    return address.is_loopback


# --- River's own endpoints ------------------------------------------------------------------


def _url_endpoint(url: str, default_port: int) -> tuple[str, int] | None:
    try:
        parsed = urlparse(url)
        return (parsed.hostname or "", parsed.port or default_port)
    except ValueError:
        return None


def _own_endpoints_configured() -> list[tuple[str, int]]:
    endpoints: list[tuple[str, int]] = []
    for db in settings.DATABASES.values():
        if "postgresql" in db.get("ENGINE", ""):
            endpoints.append((db.get("HOST") or "", int(db.get("PORT") or 5432)))
    urls = [getattr(settings, "REDIS_URL", None), getattr(settings, "CELERY_BROKER_URL", None)]
    for cache in getattr(settings, "CACHES", {}).values():
        location = cache.get("LOCATION")
        urls.extend(location if isinstance(location, list | tuple) else [location])
    for layer in getattr(settings, "CHANNEL_LAYERS", {}).values():
        for host in (layer.get("CONFIG") or {}).get("hosts") or []:
            if isinstance(host, str):
                urls.append(host)
            elif isinstance(host, list | tuple) and len(host) == 2:
                endpoints.append((str(host[0]), int(host[1])))
            elif isinstance(host, dict) and host.get("address"):
                urls.append(str(host["address"]))
    for url in urls:
        if isinstance(url, str) and "://" in url:
            endpoint = _url_endpoint(url, 6379)
            if endpoint is not None:
                endpoints.append(endpoint)
    return endpoints


def own_endpoints() -> tuple[set[tuple[IPAddress, int]], set[int]]:
    """(addresses with ports, ports on every loopback address) River itself uses."""
    exact: set[tuple[IPAddress, int]] = set()
    loopback_ports: set[int] = set()
    for host, port in _own_endpoints_configured():
        if not host or host.startswith("/") or host.lower() == "localhost":
            loopback_ports.add(port)  # a socket path or localhost: this machine
            continue
        literal = ip_literal(host)
        addresses = [literal] if literal is not None else _resolve(host, port)
        for address in addresses:
            address = _effective(address)
            if _is_loopback(address) or address.is_unspecified:
                loopback_ports.add(port)
            exact.add((address, port))
    return exact, loopback_ports


def _resolve(host: str, port: int) -> list[IPAddress]:
    found: list[IPAddress] = []
    for text in resolver(host, port):
        try:
            found.append(ipaddress.ip_address(text.split("%", 1)[0]))
        except ValueError:
            continue
    return found


# --- the policy -----------------------------------------------------------------------------


@dataclass(frozen=True)
class AllowList:
    public: bool
    names: frozenset[str]
    networks: tuple[ipaddress.IPv4Network | ipaddress.IPv6Network, ...]

    @classmethod
    def parse(cls, entries: Iterable[str]) -> AllowList:
        """Raises ValueError naming the first entry that is not public, an IP, a CIDR or a name."""
        public = False
        names: set[str] = set()
        networks = []
        for raw in entries:
            entry = raw.strip()
            if not entry:
                continue
            if entry.lower() == PUBLIC:
                public = True
                continue
            try:
                networks.append(ipaddress.ip_network(entry.strip("[]"), strict=False))
                continue
            except ValueError:
                pass
            if not _HOSTNAME.match(entry) or ip_literal(entry) is not None:
                raise ValueError(f"{entry!r} is not 'public', an IP address, a CIDR range or a host name")
            names.add(entry.lower().rstrip("."))
        return cls(public=public, names=frozenset(names), networks=tuple(networks))

    def admits(self, *, name: str | None, address: IPAddress) -> bool:
        if name is not None and name.lower().rstrip(".") in self.names:
            return True
        candidates = {address, _effective(address)}
        if any(candidate in network for candidate in candidates for network in self.networks):
            return True
        return self.public and _is_public(_effective(address))


def allow_list() -> AllowList:
    return AllowList.parse(settings.RIVER_DATA_SOURCE_ALLOWED_HOSTS)


def _refusal(host: str, why: str) -> HostNotAllowed:
    return HostNotAllowed(f"Not allowed: River does not connect to {host!r} ({why}).")


def host_syntax_check(host: str) -> str:
    """The host as given if it has the form of an IP address or a DNS name."""
    if not isinstance(host, str) or not host or len(host) > 253:
        raise HostNotAllowed("Not allowed: the host must be an IP address or a DNS name.")
    if ip_literal(host) is not None:
        return host
    if any(ch in host for ch in "/\\@,:;%?#= \t\r\n\x00") or not _HOSTNAME.match(host):
        raise HostNotAllowed("Not allowed: the host must be an IP address or a DNS name.")
    last_label = host.rstrip(".").rsplit(".", 1)[-1]
    if last_label.isdigit() or last_label.lower().startswith("0x"):
        # Looks numeric but is no address (1.2.3.256): never handed to a resolver.
        raise HostNotAllowed("Not allowed: the host must be an IP address or a DNS name.")
    return host


def host_check(*, host: str, port: int, allowed: AllowList | None = None) -> CheckedHost:
    """The address to connect to for ``host:port``, or HostNotAllowed. No packet
    is sent to the host; a name is resolved through the system resolver."""
    host_syntax_check(host)
    allowed = allowed or allow_list()
    literal = ip_literal(host)
    name = None if literal is not None else host
    addresses = [literal] if literal is not None else _resolve(host, port)
    if not addresses:
        raise HostNotAllowed(f"Host not found: {host!r} does not resolve to an address.")
    own_exact, own_loopback_ports = own_endpoints()
    for address in addresses:
        effective = _effective(address)
        if effective.is_unspecified or effective.is_multicast or any(effective in n for n in _ALWAYS_REFUSED):
            raise _refusal(host, "not a connectable address")
        if (effective, port) in own_exact or (address, port) in own_exact:
            raise _refusal(host, "River's own service")
        if port in own_loopback_ports and _is_loopback(effective):
            raise _refusal(host, "River's own service")
        if not allowed.admits(name=name, address=address):
            kind = (
                "a loopback address" if _is_loopback(effective)
                else "a link-local address" if effective.is_link_local
                else "a private address" if effective.is_private or not _is_public(effective)
                else "outside RIVER_DATA_SOURCE_ALLOWED_HOSTS"
            )
            raise _refusal(host, f"{kind}; an operator may allow it in RIVER_DATA_SOURCE_ALLOWED_HOSTS")
    return CheckedHost(host=str(literal) if literal is not None else host, address=str(addresses[0]), port=port)
