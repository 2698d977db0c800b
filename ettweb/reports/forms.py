"""The settings page's form, and the preview page's GET parameters."""

from __future__ import annotations

from typing import Any

from django import forms

from ettweb.access.roles import owned_components
from ettweb.components.known import known_components
from ettweb.queries import IsoWeek
from ettweb.reports.models import Subscription
from ettweb.reports.subscriptions import check_address, check_time_zone, time_zones


class SubscriptionForm(forms.ModelForm):
    """Address (checked on save), zone, on/off, and what the report lists first.

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

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
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
            return check_address(self.cleaned_data["email"])
        except ValueError as exc:
            raise forms.ValidationError(str(exc)) from exc

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
