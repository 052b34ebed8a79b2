"""The evals in the host project: cases made of a member's conversation keep whose words they
are — the member's key as text, whatever the host's user model keys by (an integer, a UUID, a
string: ``settings_uuid``, ``settings_str``) — and go with that member's erasure."""

import pytest
from django.contrib.auth import get_user_model

from june.testing import reply
from june_evals.datasets import examples_from_sessions
from june_evals.models import Dataset, Example
from sessions_app import models as m
from sessions_app.privacy import user_erase

pytestmark = pytest.mark.django_db


def test_cases_made_of_a_members_session_go_with_their_erasure(june):
    member = get_user_model().objects.create_user("ada@example.com")
    june.run("clerk", "order 2 mugs", model=[reply("Which mugs?")], user=member)
    session = m.Session.objects.get(agent="clerk", key="test")
    assert session.owner_id == member.pk

    dataset = Dataset.objects.create(name="from sessions")
    assert examples_from_sessions(dataset=dataset, sessions=[session]) == 1  # a 500 for a UUID key
    [example] = Example.objects.all()
    assert (example.input, example.owner_id) == ("order 2 mugs", str(member.pk))
    assert example.expect == {"reference": "Which mugs?"}

    report = user_erase(user=member)
    assert report["eval_examples"] == 1 and not Example.objects.exists()
