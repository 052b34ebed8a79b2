"""The admin shows a tree of turns (parent, children, status, timing, links), and the archive of
a reset parent lists its children."""

from __future__ import annotations

import re
from datetime import timedelta

import pytest
from asgiref.sync import async_to_sync
from django.contrib.auth import get_user_model
from django.urls import reverse
from django.utils import timezone

from sessions_app import models as m
from sessions_app import services

from .test_subagents_stream import run_tree

pytestmark = pytest.mark.django_db(transaction=True)


@pytest.fixture
def staff(client):
    user = get_user_model().objects.create_user("olga", password="pw-olga-123", is_staff=True)
    client.force_login(user)
    return user


def test_the_turn_page_shows_the_tree_with_links(client, staff):
    parent = async_to_sync(run_tree)(staff, "adm1", "research tides and harbours")
    children = list(m.Turn.objects.filter(parent_id=parent).order_by("spawn_step"))
    assert len(children) == 2
    page = client.get(reverse("admin:sessions_app_turn_change", args=[parent])).content.decode()
    assert "the tree of turns" in page
    for c in children:
        assert reverse("admin:sessions_app_turn_change", args=[c.id]) in page
        assert c.session.key in page
    assert page.count('data-status="completed"') >= 3
    # from a child, the same tree: its root is linked
    child_page = client.get(reverse("admin:sessions_app_turn_change", args=[children[0].id])).content.decode()
    assert reverse("admin:sessions_app_turn_change", args=[parent]) in child_page


def test_the_archive_of_a_reset_parent_lists_its_children(client, staff):
    parent = async_to_sync(run_tree)(staff, "adm2", "research tides")
    session = m.Turn.objects.get(pk=parent).session
    services.session_reset(agent="ops", key="adm2", user=staff)
    url = reverse("admin:sessions_app_session_generation", args=[session.pk, 0])
    page = client.get(url).content.decode()
    child = m.Turn.objects.get(parent_id=parent)
    assert "Child turns (1)" in page and child.id in page and "tides" in page


def test_child_sessions_are_not_listed_on_the_chat_home_page(client, staff):
    """Children show nested in their parent's chat; the home page lists the parent only."""
    async_to_sync(run_tree)(staff, "home1", "research tides")
    page = client.get("/").content.decode()
    assert "home1" in page and "sub:" not in page


def test_the_tree_times_each_turn_by_its_ending_event_and_cuts_long_keys(client, staff):
    """A turn's duration is created → its ending event (``updated_at`` is not stamped by a
    checkpoint, so every turn read "0.0s"); a child's long session key is cut, whole in a title."""
    parent = async_to_sync(run_tree)(staff, "adm3", "research tides and harbours")
    child = m.Turn.objects.filter(parent_id=parent).order_by("spawn_step").first()
    # created 7 s before now: its ending event came a moment before now, so it shows 5–7 s
    # however slow the machine was between the two (it read 4.8 s once, under a load of 8)
    seven_ago = timezone.now() - timedelta(seconds=7)
    m.Turn.objects.filter(pk=child.pk).update(created_at=seven_ago, updated_at=seven_ago)
    page = client.get(reverse("admin:sessions_app_turn_change", args=[parent])).content.decode()
    assert re.search(r"· [5-7]\.\d s ·", page), "the child's 5–7 s shows"
    assert "0.0s" not in page
    key = child.session.key
    assert len(key) > 24 and f'title="{key}"' in page and f"{key[:23]}…" in page
    assert "overflow-wrap:anywhere" in page
