"""An agent's ``notify = {...}``: checked when it loads, the policy's own over the agent's."""

import pytest

from agents_app.runtime.errors import AgentConfigError
from agents_app.runtime.notify import destination, notify_config


def test_a_policy_s_settings_over_the_agent_s():
    conf = notify_config(
        "a",
        {
            "email": True,
            "webhook_url": "https://h.example/a",
            "policies": {"operator": {"webhook_url": "https://h.example/op", "email": False}},
        },
    )
    assert destination(conf, "operator") == {"email": False, "webhook_url": "https://h.example/op"}
    assert destination(conf, "other") == {"email": True, "webhook_url": "https://h.example/a"}
    assert destination(conf, None) == {"email": True, "webhook_url": "https://h.example/a"}
    assert destination(notify_config("a", None), "operator") == {}


@pytest.mark.parametrize(
    "bad",
    [
        [],
        {"mail": True},
        {"email": "yes"},
        {"webhook_url": "ftp://x"},
        {"webhook_url": 3},
        {"policies": []},
        {"policies": {"op": {"url": "https://x"}}},
        {"policies": {"op": "https://x"}},
    ],
)
def test_a_bad_notify_is_refused_at_load(bad):
    with pytest.raises(AgentConfigError):
        notify_config("a", bad)
