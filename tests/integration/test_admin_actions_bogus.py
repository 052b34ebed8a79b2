"""Every changelist action of June's admin pages answers a forged selection with a message: a
staff POST whose ``_selected_action`` is not a key (``nonsense``), a key out of the column's
range, or a key of no row ran Django's ``pk__in`` filter on it and answered 500
(``ValueError: Field 'id' expected a number but got 'nonsense'``)."""

from __future__ import annotations

import pytest
from django.contrib import admin
from django.contrib.auth import get_user_model
from django.contrib.messages import get_messages
from django.test import Client, RequestFactory
from django.urls import reverse

pytestmark = pytest.mark.django_db

OURS = ("sessions_app", "june_evals", "agents_app")
BOGUS = ("nonsense", "99999999999999999999", "-99999999999999999999", "2147483000", "1e3", "")


def our_actions(user) -> list[tuple[type, str, str]]:
    request = RequestFactory().get("/admin/")
    request.user = user
    found = []
    for model, model_admin in admin.site._registry.items():
        if not type(model_admin).__module__.startswith(OURS):
            continue
        url = reverse(f"admin:{model._meta.app_label}_{model._meta.model_name}_changelist")
        found += [(model, url, name) for name in model_admin.get_actions(request)]
    return found


def test_every_action_of_ours_answers_a_bogus_selection_with_a_message():
    user = get_user_model().objects.create_superuser("boss", password="pw-boss-123")
    client = Client()
    client.force_login(user)
    actions = our_actions(user)
    names = {name for _, _, name in actions}
    assert {"delete_selected", "erase_owners", "run_now", "retry", "make_eval_cases"} <= names, names
    for model, url, name in actions:
        for bogus in BOGUS:
            response = client.post(url, {"action": name, "index": 0, "_selected_action": [bogus]})
            where = f"{model.__name__}.{name} with {bogus!r}"
            assert response.status_code in (200, 302), where
            said = [str(message) for message in get_messages(response.wsgi_request)]
            assert said, f"{where}: no message"
