"""Names that are not UTF-8 as the model reads and writes them (docs/TOOLS.md): `shown` and
`unshown` in the toolbox's paths module."""

from __future__ import annotations

import os

from hypothesis import given
from hypothesis import strategies as st

from executor.sandbox.toolbox.paths import shown, unshown

# What os.fsdecode makes of any bytes: text, and each byte that is not UTF-8 as U+DC80..U+DCFF.
names = st.binary(max_size=40).map(os.fsdecode)
tricky = st.lists(st.sampled_from(["\\", "x", "e9", "\udce9", "a", "\\x", "\\\\", "xff", "é"]),
                  max_size=12).map("".join)


@given(st.one_of(names, tricky))
def test_every_name_reads_back_as_itself_and_reaches_a_model_as_text(name: str):
    assert unshown(shown(name)) == name
    assert not [c for c in shown(name) if "\ud800" <= c <= "\udfff"]  # any JSON carries it


def test_the_forms_of_some_names():
    assert shown(os.fsdecode(b"caf\xe9.txt")) == "caf\\xe9.txt"
    assert shown(os.fsdecode(b"d\xff/a\\b\xfe")) == "d\\xff/a\\\\b\\xfe"
    assert shown("a\\b") == "a\\b" and shown("caf\\xe9") == "caf\\\\xe9"  # UTF-8 names
    assert unshown("caf\\xE9.txt") == os.fsdecode(b"caf\xe9.txt")  # upper case hex too
    assert unshown("a\\b") == "a\\b" and unshown("x\\x41") == "x\\x41"  # taken as written
