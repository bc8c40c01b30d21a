"""Property: however an IPv4 address is spelled (the forms inet_aton and therefore libpq
accept, or IPv6 forms carrying it), the policy sees the address it means."""

from __future__ import annotations

import ipaddress

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from datasources import network

FORBIDDEN = [ipaddress.ip_network(n) for n in
             ("10.0.0.0/8", "172.16.0.0/12", "192.168.0.0/16", "169.254.0.0/16", "127.0.0.0/8", "100.64.0.0/10")]


@st.composite
def forbidden_addresses(draw) -> ipaddress.IPv4Address:
    network_ = draw(st.sampled_from(FORBIDDEN))
    offset = draw(st.integers(min_value=0, max_value=network_.num_addresses - 1))
    return network_.network_address + offset


def _part(value: int, style: str) -> str:
    return {"dec": str(value), "hex": hex(value), "HEX": "0X" + format(value, "X"), "oct": "0" + format(value, "o")}[
        style
    ] if value or style == "dec" else "0"


@st.composite
def spellings(draw, address: ipaddress.IPv4Address) -> str:
    number = int(address)
    octets = list(address.packed)
    form = draw(st.sampled_from(["4", "3", "2", "1", "mapped", "compatible", "nat64", "sixtofour"]))
    style = st.sampled_from(["dec", "hex", "HEX", "oct"])
    if form == "4":
        return ".".join(_part(o, draw(style)) for o in octets)
    if form == "3":
        return ".".join([_part(octets[0], draw(style)), _part(octets[1], draw(style)),
                         _part(number & 0xFFFF, draw(style))])
    if form == "2":
        return ".".join([_part(octets[0], draw(style)), _part(number & 0xFFFFFF, draw(style))])
    if form == "1":
        return _part(number, draw(style))
    if form == "mapped":
        return f"::ffff:{address}"
    if form == "compatible":
        return f"::{address}" if number > 1 else "::ffff:0.0.0.0"
    if form == "nat64":
        return str(ipaddress.IPv6Address(int(ipaddress.IPv6Address("64:ff9b::")) + number))
    return str(ipaddress.IPv6Address((0x2002 << 112) | (number << 80)))


@pytest.fixture(autouse=True)
def _public_only(settings):
    settings.RIVER_DATA_SOURCE_ALLOWED_HOSTS = ["public"]


@settings(max_examples=300, deadline=None)
@given(st.data())
def test_every_spelling_of_a_private_address_is_refused(data):
    address = data.draw(forbidden_addresses())
    spelled = data.draw(spellings(address))
    literal = network.ip_literal(spelled)
    assert literal is not None, spelled
    assert (network.embedded_ipv4(literal) or literal) == address, spelled
    with pytest.raises(network.HostNotAllowed):
        network.host_check(host=spelled, port=5433)


@settings(max_examples=200, deadline=None)
@given(st.text(alphabet="0123456789abcdefxX.:[]%", min_size=1, max_size=24))
def test_anything_that_parses_as_an_address_is_judged_as_that_address(text):
    literal = network.ip_literal(text)
    try:
        checked = network.host_check(host=text, port=5433)
    except network.HostNotAllowed:
        return
    # Passed: it must be an address (no name lookups for such strings) and a public one.
    assert literal is not None, text
    assert ipaddress.ip_address(checked.address) == literal
    assert (network.embedded_ipv4(literal) or literal).is_global
