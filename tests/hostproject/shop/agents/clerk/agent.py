"""The shop's clerk: June's offline demo model, so the host project runs without an API key."""

model = "demo"


def authorize_answer(*, policy, scope, by, principal):
    """Staff members answer this shop's approvals."""
    from django.contrib.auth import get_user_model

    uid = principal.get("user_id") if isinstance(principal, dict) else principal
    member = get_user_model().objects.filter(pk=uid).first()
    return bool(member and member.is_active and member.is_staff)
