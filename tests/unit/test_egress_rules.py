"""The allow-list: what a rule means, which addresses are public, and what a range allows."""

from __future__ import annotations

import ipaddress

import pytest

from executor.errors import ConfigError
from executor.network.rules import EgressRules, is_public, kind_of, parse_rule

ip = ipaddress.ip_address


def rules(*texts: str) -> EgressRules:
    return EgressRules(parse_rule(text, "--allow-host") for text in texts)


def test_a_name_without_a_port_allows_80_and_443_only():
    allow = rules("Example.ORG")
    assert allow.rule_for("example.org", 443) is not None
    assert allow.rule_for("example.org.", 80) is not None
    assert allow.rule_for("example.org", 8080) is None
    assert allow.rule_for("www.example.org", 443) is None
    assert rules("example.org:8080").rule_for("example.org", 8080) is not None
    assert rules("example.org:8080").rule_for("example.org", 443) is None


def test_a_wildcard_allows_names_below_it_not_itself_nor_lookalikes():
    allow = rules("*.example.org")
    assert allow.rule_for("a.example.org", 443) and allow.rule_for("a.b.example.org", 443)
    assert allow.rule_for("example.org", 443) is None
    assert allow.rule_for("badexample.org", 443) is None
    assert allow.rule_for("example.org.evil.test", 443) is None


def test_an_address_is_allowed_by_its_range_never_by_a_name_rule():
    assert rules("10.1.0.0/16:5432").rule_for("10.1.2.3", 5432) is not None
    assert rules("10.1.0.0/16:5432").rule_for("10.2.0.1", 5432) is None
    assert rules("[::1]:8080").rule_for("::1", 8080) is not None
    assert rules("localhost:8080").rule_for("127.0.0.1", 8080) is None


@pytest.mark.parametrize("text", ["", ":80", "exa mple.org", "a..b", "-a.org", "host:0",
                                  "host:99999", "host:http", "10.0.0.1/8", "1.2.3", "[::1"])
def test_a_bad_rule_is_a_config_error_naming_its_source(text: str):
    with pytest.raises(ConfigError, match=r"--allow-host|host|port|address"):
        parse_rule(text, "--allow-host")


@pytest.mark.parametrize("address", [
    "127.0.0.1", "10.0.0.1", "172.16.0.1", "192.168.1.1", "100.64.0.1", "169.254.169.254",
    "169.254.1.1", "224.0.0.251", "0.0.0.0", "255.255.255.255", "::1", "fe80::1", "fc00::1",
    "fd00:ec2::254", "::ffff:127.0.0.1", "::ffff:169.254.169.254", "ff02::1", "203.0.113.7",
])
def test_non_public_addresses(address: str):
    assert not is_public(ip(address))


def test_public_addresses_and_the_words_for_others():
    assert is_public(ip("93.184.215.14")) and is_public(ip("2606:4700::1111"))
    assert kind_of(ip("169.254.169.254")) == "a cloud metadata"
    assert kind_of(ip("fd00:ec2::254")) == "a cloud metadata"
    assert kind_of(ip("::ffff:127.0.0.1")) == "a loopback"


def test_a_private_address_behind_an_allowed_name_needs_that_exact_range():
    allow = rules("db.test:5432")
    rule = allow.rule_for("db.test", 5432)
    assert rule is not None
    refused = allow.check_address(ip("10.0.0.5"), 5432, rule)
    assert not refused.allowed
    assert "10.0.0.5, a private address" in refused.reason
    assert "--allow-host 10.0.0.5/32:5432" in refused.reason
    ranged = rules("db.test:5432", "10.0.0.0/24:5432")
    verdict = ranged.check_address(ip("10.0.0.5"), 5432, rule)
    assert verdict.allowed and verdict.address_rule and verdict.address_rule.text == "10.0.0.0/24:5432"
    assert not ranged.check_address(ip("10.0.0.5"), 5433, rule).allowed  # the range's port only


def test_a_presets_address_never_opens_a_non_public_one():
    """Red-team round 25: a registry named by an address became a range rule, so the loopback,
    private and metadata addresses it named were reachable; a preset names hosts only."""
    for text, address, port in (("127.0.0.1:18099", "127.0.0.1", 18099),
                                ("169.254.169.254", "169.254.169.254", 80),
                                ("[fd00::1]:443", "fd00::1", 443)):
        preset = EgressRules([parse_rule(text, "preset npm")])
        host = text.rsplit(":", 1)[0] if text.count(":") == 1 or "]" in text else text
        rule = preset.rule_for(host.strip("[]"), port)
        assert rule is not None, text
        refused = preset.check_address(ip(address), port, rule)
        assert not refused.allowed and "--allow-host" in refused.reason, text
        named = EgressRules([parse_rule(text, "preset npm"), parse_rule(text, "--allow-host")])
        assert named.check_address(ip(address), port, rule).allowed, text


def test_localhost_port_allows_the_loopback_for_that_port_only():
    allow = rules("localhost:8080")
    rule = allow.rule_for("localhost", 8080)
    assert rule is not None
    assert allow.check_address(ip("127.0.0.1"), 8080, rule).allowed
    assert not allow.check_address(ip("10.0.0.1"), 8080, rule).allowed
    assert not allow.check_address(ip("169.254.169.254"), 8080, rule).allowed
    assert rules("localhost:8080").loopback() and rules("127.0.0.1/32:80").loopback()
    assert not rules("example.org", "10.0.0.0/8").loopback()
