"""The settings page's form, and the preview page's GET parameters."""

from __future__ import annotations

from typing import Any

from django import forms

from ettweb.access.roles import owned_components
from ettweb.components.known import known_components
from ettweb.queries import IsoWeek
from ettweb.reports.models import Subscription
from ettweb.reports.subscriptions import (
    AddressRefused,
    allowed_address,
    check_time_zone,
    time_zones,
)


class SubscriptionForm(forms.ModelForm):
    """Address (checked on save), zone, on/off, and what the report lists first.

    The address is the account's, or one an admin set (``allowed_address``): for anyone but
    an admin (``by_admin``) the field is shown read-only and any other value is refused by
    name, never silently replaced.

    ``owned`` is shown only to someone who owns a component: for anyone else the box would
    change nothing they can see, and the saved value stays (on by default), so components
    given to them later are listed without another visit here.
    """

    #: The single checkboxes: drawn with their label after the box.
    CHECKS = ("enabled", "fleet", "owned")

    components = forms.MultipleChoiceField(required=False, widget=forms.CheckboxSelectMultiple,
                                           help_text="listed first, before the fleet")
    time_zone = forms.CharField(max_length=64, help_text=(
        "the report arrives Monday 09:00 here, an IANA name like Europe/Berlin"),
        widget=forms.TextInput(attrs={"list": "time-zones", "autocomplete": "off"}))

    class Meta:
        model = Subscription
        fields = ["enabled", "email", "time_zone", "fleet", "owned", "components"]
        labels = {"enabled": "Send me the weekly report", "email": "E-mail address",
                  "fleet": "Include the whole fleet",
                  "owned": "List the components I own first"}
        help_texts = {"enabled": "", "email": "checked when you save"}

    def __init__(self, *args: Any, by_admin: bool = False, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.by_admin = by_admin
        email = self.fields["email"]
        if by_admin:
            email.help_text = ("checked when you save; as an admin you may send it to any "
                               "address (otherwise it is your account's)")
        else:
            email.required = False  # an account without one gets the reason, not "required"
            email.widget.attrs["readonly"] = True
            email.help_text = (
                "set by an admin for you" if self.instance.pk and self.instance.email_from_admin
                else "your account's address; an admin can send the report elsewhere")
        components = self.fields["components"]
        assert isinstance(components, forms.MultipleChoiceField)
        components.choices = [(c, c) for c in known_components()]
        owned = sorted(owned_components(self.instance.user))
        if owned:
            self.fields["owned"].help_text = f"you own {', '.join(owned)}"
        else:
            del self.fields["owned"]
        # Django's validator runs before clean_email: same words as check_address, naming it.
        self.fields["email"].error_messages["invalid"] = "%(value)r is not a valid e-mail address"

    def clean_email(self) -> str:
        try:
            return allowed_address(self.instance, self.cleaned_data["email"] or "",
                                   by_admin=self.by_admin)
        except (AddressRefused, ValueError) as exc:
            raise forms.ValidationError(str(exc)) from exc

    def save(self, commit: bool = True) -> Subscription:
        """Remember whether the address is an admin's choice (not the account's): only
        then does it stay when the account's address changes. Anyone else can only keep an
        admin's address or take the account's (``allowed_address``), so for both the
        choice is an admin's exactly when it is not the account's."""
        subscription: Subscription = super().save(commit=False)
        subscription.email_from_admin = subscription.email != (subscription.user.email or "")
        if commit:
            subscription.save()
        return subscription

    def clean_time_zone(self) -> str:
        name = self.cleaned_data["time_zone"].strip()
        try:
            check_time_zone(name)
        except ValueError as exc:
            raise forms.ValidationError(str(exc)) from exc
        return name

    @staticmethod
    def zone_names() -> list[str]:
        return sorted(time_zones())


class PreviewForm(forms.Form):
    """``?week=2026-W47&user=NAME`` (``user``: staff only; default the last complete week)."""

    week = forms.CharField(required=False)
    user = forms.CharField(required=False)

    def clean_week(self) -> IsoWeek | None:
        text = self.cleaned_data.get("week") or ""
        if not text:
            return None
        try:
            return IsoWeek.parse(text)
        except ValueError as exc:
            raise forms.ValidationError(str(exc)) from exc
