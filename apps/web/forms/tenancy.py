"""Forms of tokens and members. Membership rules (one membership per user, the last owner stays) are
`Membership.clean()`; a token's are `ApiToken.clean()`."""

from __future__ import annotations

from django import forms
from django.conf import settings
from django.db.models import Q

from apps.core.choices import Role
from apps.tenancy.models import NO_SUCH_USER, addable_users
from apps.web.forms import PlainLabels

EXPIRY_DAYS = (7, 30, 90, 365)


def max_token_days() -> int:
    return int(getattr(settings, "TOKEN_MAX_DAYS", 365))


class TokenForm(PlainLabels, forms.Form):
    name = forms.CharField(max_length=100, help_text="What uses it, e.g. ci-deploy.")
    expires_days = forms.TypedChoiceField(label="Expires in", coerce=int, initial=30)

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        days = [d for d in EXPIRY_DAYS if d <= max_token_days()] or [max_token_days()]
        self.fields["expires_days"].choices = [(d, f"{d} days") for d in days]


class AddMemberForm(PlainLabels, forms.Form):
    user = forms.CharField(label="Username or e-mail", max_length=254)
    role = forms.ChoiceField(choices=Role.choices, initial=Role.VIEWER)

    def clean_user(self):
        value = self.cleaned_data["user"].strip()
        users = addable_users().filter(Q(username=value) | Q(email__iexact=value))
        matches = list(users[:2])
        if not matches:
            raise forms.ValidationError(NO_SUCH_USER.format(value=value))
        if len(matches) > 1:
            raise forms.ValidationError("Several users have this e-mail address; give the username instead.")
        return matches[0]


class RoleForm(PlainLabels, forms.Form):
    role = forms.ChoiceField(choices=Role.choices)
