"""Certificate names as Kafka prints them, ssl.principal.mapping.rules, JAAS parsing."""

from __future__ import annotations

import pytest

from odradek.broker.security.jaas import JaasError, parse_jaas
from odradek.broker.security.principal import dn_of_peercert, map_principal, parse_rules

CERT = {
    "subject": (
        (("countryName", "US"),),
        (("organizationName", "acme, inc"),),
        (("organizationalUnitName", "eng"),),
        (("commonName", "alice"),),
    )
}


def test_subject_is_written_most_specific_first_with_escapes() -> None:
    assert dn_of_peercert(CERT) == "CN=alice,OU=eng,O=acme\\, inc,C=US"


def test_default_rule_keeps_the_distinguished_name() -> None:
    assert map_principal("CN=alice,OU=eng", parse_rules("DEFAULT")) == "User:CN=alice,OU=eng"


def test_rules_apply_in_order_with_case_flags() -> None:
    rules = parse_rules("RULE:^CN=(.*?),OU=ops.*$/$1-ops/U, RULE:^CN=(.*?),.*$/$1/L,DEFAULT")
    assert map_principal("CN=Bob,OU=ops,O=x", rules) == "User:BOB-OPS"
    assert map_principal("CN=Alice,OU=eng", rules) == "User:alice"
    assert map_principal("UID=7", rules) == "User:UID=7"


def test_no_matching_rule_is_an_error() -> None:
    with pytest.raises(ValueError, match=r"no ssl\.principal\.mapping\.rules rule"):
        map_principal("UID=7", parse_rules("RULE:^CN=(.*)$/$1/"))


@pytest.mark.parametrize("rules", ["RULE:[/x/", "NOPE", "DEFAULT junk"])
def test_bad_rules_are_refused(rules: str) -> None:
    with pytest.raises(ValueError):
        parse_rules(rules)


def test_jaas_options_with_quotes_and_escapes() -> None:
    entry = parse_jaas(
        "org.apache.kafka.common.security.plain.PlainLoginModule required "
        'username="admin" user_admin="a\\"b c" user_x=plain;'
    )
    assert entry.login_module.endswith("PlainLoginModule")
    assert entry.options == {"username": "admin", "user_admin": 'a"b c', "user_x": "plain"}


@pytest.mark.parametrize("text", ["", "Module", 'Module required user_a="x"', "Module maybe;"])
def test_bad_jaas_is_refused(text: str) -> None:
    with pytest.raises(JaasError):
        parse_jaas(text)
