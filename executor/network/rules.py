"""Which hosts a run may reach: the person's allow-list, and the addresses nobody allowed.

A rule is `HOST[:PORT]`: a name (`example.org`), a wildcard (`*.example.org`: any name below
it, not the name itself), an address or a range (`127.0.0.1`, `10.1.0.0/16`, `[::1]`,
`[fd00::/8]:5432`). Without a port a rule allows 80 and 443. A name is allowed when a rule names
it; the address the proxy then connects to must be a public one, unless a range rule covers
that address and port, or the rule is `localhost:PORT` and the address is loopback. So a name
that resolves to 127.0.0.1 or to a cloud's metadata address is refused unless the person
allowed exactly that. Nothing here reads the project tree: rules come from flags, the user
config and the person's policy.
"""

from __future__ import annotations

import ipaddress
import re
import socket
from collections.abc import Iterable
from dataclasses import dataclass

from executor.errors import ConfigError

Address = ipaddress.IPv4Address | ipaddress.IPv6Address
Network = ipaddress.IPv4Network | ipaddress.IPv6Network

DEFAULT_PORTS = (80, 443)
"""What a rule without a port allows."""
METADATA = frozenset(ipaddress.ip_address(text) for text in ("169.254.169.254", "fd00:ec2::254"))
"""Cloud metadata services: never public, named in the reason so the person sees why."""
_LABEL = re.compile(r"(?!-)[a-z0-9-]{1,63}(?<!-)")
_FIX = "write HOST, HOST:PORT, *.DOMAIN, an address or a range (10.0.0.0/8, [::1]:8080)"


@dataclass(frozen=True)
class Rule:
    """One allowed destination, and who allowed it."""

    text: str
    """As the person wrote it (shown in records and prompts)."""
    source: str
    """Where it came from: `--allow-host`, `config`, `preset pypi`, `approved at the terminal`."""
    host: str = ""
    """A lower-case name or `*.suffix`; empty for a range rule."""
    network: Network | None = None
    """The range a range rule covers."""
    port: int | None = None
    """The one port allowed; None: `DEFAULT_PORTS`."""

    def allows_port(self, port: int) -> bool:
        """Whether `port` is this rule's."""
        return port == self.port if self.port is not None else port in DEFAULT_PORTS

    def names(self, host: str) -> bool:
        """Whether this rule names `host` (a lower-case name without a trailing dot)."""
        if not self.host:
            return False
        if self.host.startswith("*."):
            return host.endswith(self.host[1:]) and len(host) > len(self.host) - 1
        return host == self.host

    def covers(self, address: Address, port: int) -> bool:
        """Whether this rule allows connecting to `address`:`port` though it is not public."""
        if not self.allows_port(port):
            return False
        if self.network is not None:
            return address in self.network
        return self.host == "localhost" and self.port is not None and address.is_loopback


@dataclass(frozen=True)
class Verdict:
    """What the rules say about one destination."""

    allowed: bool
    rule: Rule | None = None
    """The rule that allowed the destination (by its name, or its address)."""
    reason: str = ""
    address_rule: Rule | None = None
    """The range (or `localhost:PORT`) rule that allowed a non-public address."""


def parse_rule(text: str, source: str) -> Rule:
    """The rule `text` means; ConfigError naming `source` when it is not one."""
    raw = text.strip()
    host, port = _split_port(raw, source)
    if not host:
        raise ConfigError(f"empty host in allowed host {text!r} ({source})", fix=_FIX)
    network = _network(host)
    if raw.startswith("[") and network is None:
        raise ConfigError(f"not an IPv6 address or range in brackets: {text!r} ({source})",
                          fix=_FIX)
    if network is not None:
        return Rule(raw, source, network=network, port=port)
    name = host.lower().rstrip(".")
    bare = name[2:] if name.startswith("*.") else name
    if not all(_LABEL.fullmatch(label) for label in bare.split(".")):
        raise ConfigError(f"not a host name: {text!r} ({source})", fix=_FIX)
    return Rule(raw, source, host=name, port=port)


def parse_rules(texts: Iterable[str], source: str) -> list[Rule]:
    """Each of `texts` as a rule from `source`."""
    return [parse_rule(text, source) for text in texts if text.strip()]


def _split_port(text: str, source: str) -> tuple[str, int | None]:
    if text.startswith("["):  # [v6] or [v6/len], then :PORT
        inside, bracket, rest = text[1:].partition("]")
        if not bracket or (rest and not rest.startswith(":")):
            raise ConfigError(f"not an allowed host: {text!r} ({source})", fix=_FIX)
        return inside, _port(rest[1:], text, source) if rest else None
    if text.count(":") > 1:  # a bare IPv6 address or range: no port
        return text, None
    host, colon, port = text.partition(":")
    return host, _port(port, text, source) if colon else None


def _port(text: str, whole: str, source: str) -> int:
    if not text.isdigit() or not 0 < int(text) < 65536:
        raise ConfigError(f"not a port in allowed host {whole!r} ({source})", fix=_FIX)
    return int(text)


def _network(host: str) -> Network | None:
    try:
        return ipaddress.ip_network(host, strict=True)
    except ValueError:
        if "/" in host or host.replace(".", "").isdigit():
            raise ConfigError(f"not an address or a range: {host!r}", fix=_FIX) from None
        return None


class EgressRules:
    """The person's allow-list, asked about one destination at a time."""

    def __init__(self, rules: Iterable[Rule]) -> None:
        self.rules = tuple(rules)

    def __bool__(self) -> bool:
        return bool(self.rules)

    def texts(self) -> list[str]:
        """The rules as written, in a stable order (what the sandbox spec holds)."""
        return sorted({rule.text for rule in self.rules})

    def loopback(self) -> bool:
        """Whether some rule reaches the host's loopback (`localhost:PORT`, 127.0.0.0/8 ...):
        then `localhost` in the sandbox must go through the proxy too."""
        loops = [ipaddress.ip_network("127.0.0.0/8"), ipaddress.ip_network("::1/128")]
        return any(rule.host == "localhost" or (rule.network is not None and any(
            rule.network.version == net.version and rule.network.overlaps(net)
            for net in loops)) for rule in self.rules)

    def rule_for(self, host: str, port: int) -> Rule | None:
        """The first rule allowing `host`:`port` by its name or, for an address, its range."""
        literal = address_of(host)
        for rule in self.rules:
            if not rule.allows_port(port):
                continue
            if literal is not None and rule.network is not None and literal in rule.network:
                return rule
            if literal is None and rule.names(host.lower().rstrip(".")):
                return rule
        return None

    def check_address(self, address: Address, port: int, rule: Rule) -> Verdict:
        """Whether the proxy may connect to `address` for a destination `rule` allowed. A
        non-public address needs a range the person named; a yes at the prompt (`rule` from
        the person's answer) and a preset (read from pip's or npm's configuration) name a
        host, never that."""
        if is_public(address):
            return Verdict(True, rule)
        for candidate in (rule, *self.rules):
            if not _names_only(candidate) and candidate.covers(address, port):
                return Verdict(True, rule, address_rule=candidate)
        hint = _range_hint(address, port)
        return Verdict(False, rule, f"it resolves to {address}, {kind_of(address)} address; "
                                    f"allow exactly that with --allow-host {hint}")


def _names_only(rule: Rule) -> bool:
    """A rule that never opens a non-public address: a yes at the prompt, or a preset's."""
    return rule.source in ("user", "user:session") or rule.source.startswith("preset ")


def address_of(host: str) -> Address | None:
    """`host` as an IP address, or None for a name."""
    try:
        return ipaddress.ip_address(host.strip("[]"))
    except ValueError:
        return None


EMBEDDING = tuple(ipaddress.ip_network(n) for n in (
    "64:ff9b::/96", "64:ff9b:1::/48", "2002::/16", "::/96", "::ffff:0:0:0/96"))
"""IPv6 ranges that carry an IPv4 address (NAT64, 6to4, IPv4-compatible, -translated): where
a gateway unwraps them they reach whatever the IPv4 address is, so they are never public."""


def is_public(address: Address) -> bool:
    """A globally routable unicast address (not loopback, private, link-local, CGNAT, multicast,
    reserved or metadata); an IPv4 address inside IPv6 is judged as itself, and the IPv6
    ranges that embed one otherwise are not public."""
    if isinstance(address, ipaddress.IPv6Address) and address.ipv4_mapped is not None:
        address = address.ipv4_mapped
    if isinstance(address, ipaddress.IPv6Address) and any(address in n for n in EMBEDDING):
        return False
    return address.is_global and not address.is_multicast and address not in METADATA


def valid_host(host: str) -> bool:
    """A host a request may name: an IP address, or a DNS name of ASCII labels (letters,
    digits, hyphens; 63 each, 253 in all) with no wildcard, NUL or other character a rule
    or the resolver would read otherwise."""
    if address_of(host) is not None:
        return True
    name = host.lower().rstrip(".")
    if not (0 < len(name) <= 253 and name.isascii()
            and all(_LABEL.fullmatch(label) for label in name.split("."))):
        return False
    try:  # 0x7f.0.0.1, 0177.1, 2130706433: the resolver reads them as an IPv4 address
        socket.inet_aton(name)
    except OSError:
        return True
    return False


def kind_of(address: Address) -> str:
    """A word for why `address` is not public."""
    if isinstance(address, ipaddress.IPv6Address) and address.ipv4_mapped is not None:
        address = address.ipv4_mapped
    if address in METADATA:
        return "a cloud metadata"
    for word, test in (("a loopback", address.is_loopback), ("a link-local", address.is_link_local),
                       ("a multicast", address.is_multicast), ("a private", address.is_private)):
        if test:
            return word
    return "a non-public"


def _range_hint(address: Address, port: int) -> str:
    text = f"{address}/{address.max_prefixlen}"
    return f"[{text}]:{port}" if address.version == 6 else f"{text}:{port}"
