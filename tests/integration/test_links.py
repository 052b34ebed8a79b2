"""``links.turn_api`` (the ``Location`` of every 202) formats the turn route reversed once; it
must give what ``reverse`` gives, for any values and under any script prefix."""

from __future__ import annotations

import pytest
from django.urls import NoReverseMatch, reverse, set_script_prefix

from sessions_app.web import links

VALUES = [
    ("ops", "s1", "0123abc"),
    ("ops", "a:b@c.d-e_f", "x"),
    ("dé mo", "k", "t"),
    ("a%b", "k?x#y", "t t"),
    ("a{b}", "{0}", "}{"),
    ("j9agent9j", "j9session9j", "j9turn9j"),
    ("ops", "", "t"),
    ("ops", "a/b", "t"),
]


def _either(fn, *args, **kwargs):
    try:
        return fn(*args, **kwargs)
    except NoReverseMatch:
        return NoReverseMatch


@pytest.mark.parametrize("prefix", ["/", "/mount/"])
def test_a_turns_url_is_the_one_reverse_gives(prefix):
    set_script_prefix(prefix)
    try:
        for agent, key, turn_id in VALUES:
            kwargs = {"agent": agent, "session": key, "turn_id": turn_id}
            assert _either(links.turn_api, agent, key, turn_id) == _either(reverse, "june_api:turn", kwargs=kwargs)
    finally:
        set_script_prefix("/")
