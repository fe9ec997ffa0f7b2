"""Forms of the finance pages. Each field is checked by the same function its service uses,
so the form and the service refuse the same input with the same sentence."""

from __future__ import annotations

from datetime import UTC, date, datetime, time, timedelta
from decimal import Decimal
from typing import Any

from django import forms
from django.core.exceptions import ValidationError

from billing import budgets, invoicing
from billing.fractions import FractionError, mig_fraction
from billing.models import Budget


class GpuModelField(forms.ChoiceField):
    """A select of the GPU models of the fleet's nodes (``inventory_models``): a price for a
    model the fleet has not got would never meet a metered hour, and is most likely a typo."""

    def __init__(self, **kwargs: Any) -> None:
        super().__init__(choices=(), label="GPU model", **kwargs)
        self.models: list[str] = []

    def refresh(self) -> None:
        """Offer the inventory as it is now (the form is built per request)."""
        models = self.models = inventory_models()
        self.choices = [(m, m) for m in models]
        if not models:
            self.help_text = (
                "No GPU nodes are known yet: the fleet's inventory fills on its first sync."
            )

    def validate(self, value: Any) -> None:
        if value and not self.valid_value(value):
            there = ", ".join(self.models) or "none yet"
            raise ValidationError(
                f"{value!r} is not a GPU model of the fleet's nodes (they have: {there}).",
                code="invalid_choice",
            )
        super().validate(value)


class PriceForm(forms.Form):
    gpu_model = GpuModelField(help_text="A GPU model of the fleet's nodes")
    mig_profile = forms.CharField(
        label="MIG profile",
        max_length=32,
        required=False,
        help_text="Empty for a whole GPU-hour; else e.g. 1g.18gb",
    )
    amount = forms.CharField(max_length=20, help_text="Per hour, at most four decimals")
    effective_from = forms.DateField(
        help_text="A future date (UTC): the price applies from its midnight on",
        widget=forms.DateInput(attrs={"type": "date"}),
    )
    note = forms.CharField(max_length=200, required=False)

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        field = self.fields["gpu_model"]
        assert isinstance(field, GpuModelField)
        field.refresh()

    def clean_mig_profile(self) -> str:
        profile = str(self.cleaned_data["mig_profile"]).strip()
        if profile:
            try:
                mig_fraction(profile)
            except FractionError as exc:
                raise ValidationError(str(exc)) from None
        return profile

    def clean_amount(self) -> Decimal:
        try:
            return invoicing.check_amount(self.cleaned_data["amount"])
        except ValidationError as exc:
            raise ValidationError(exc.message_dict["amount"]) from None

    def clean_effective_from(self) -> date:
        day: date = self.cleaned_data["effective_from"]
        if day <= invoicing.today_utc():
            raise ValidationError(
                f"A price starts after today ({invoicing.today_utc():%Y-%m-%d} UTC): prices "
                "never reach back to hours already metered."
            )
        return day


def inventory_models() -> list[str]:
    """The GPU models of the nodes the portal knows (GPU feature discovery's product label)."""
    from fleet.models import Node

    return sorted(
        set(
            Node.objects.filter(gpu_count__gt=0)
            .exclude(product="")
            .values_list("product", flat=True)
        )
    )


class ReservationPriceForm(forms.Form):
    """A price per GPU-hour of a reserved node, for a GPU model of the inventory."""

    prefix = "reservation"
    gpu_model = GpuModelField(help_text="A GPU model of the fleet's nodes")
    amount = forms.CharField(
        max_length=20, help_text="Per GPU-hour of a reserved node, at most four decimals"
    )
    effective_from = forms.DateField(
        help_text="A future date (UTC): the price applies from its midnight on",
        widget=forms.DateInput(attrs={"type": "date"}),
    )
    note = forms.CharField(max_length=200, required=False)

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        field = self.fields["gpu_model"]
        assert isinstance(field, GpuModelField)
        field.refresh()

    def clean_amount(self) -> Decimal:
        try:
            return invoicing.check_amount(self.cleaned_data["amount"])
        except ValidationError as exc:
            raise ValidationError(exc.message_dict["amount"]) from None

    def clean_effective_from(self) -> date:
        day: date = self.cleaned_data["effective_from"]
        if day <= invoicing.today_utc():
            raise ValidationError(
                f"A price starts after today ({invoicing.today_utc():%Y-%m-%d} UTC): prices "
                "never reach back to hours already billed."
            )
        return day


class BudgetForm(forms.Form):
    monthly_amount = forms.CharField(max_length=20, help_text="Per calendar month (UTC)")
    thresholds = forms.CharField(
        max_length=100,
        required=False,
        help_text="Percentages that raise an alert, comma-separated; empty for the defaults",
    )

    @staticmethod
    def initial_for(budget: Budget | None) -> dict[str, object]:
        if budget is None:
            return {}
        return {
            "monthly_amount": budget.monthly_amount,
            "thresholds": ", ".join(str(t) for t in budget.thresholds),
        }

    def clean_monthly_amount(self) -> Decimal:
        try:
            return budgets.check_monthly_amount(self.cleaned_data["monthly_amount"])
        except ValidationError as exc:
            raise ValidationError(exc.message_dict["monthly_amount"]) from None

    def clean_thresholds(self) -> list[int]:
        parts = [p for p in str(self.cleaned_data["thresholds"]).split(",") if p.strip()]
        try:
            return budgets.check_thresholds(parts)
        except ValidationError as exc:
            raise ValidationError(exc.message_dict["thresholds"]) from None


class CorrectionForm(forms.Form):
    reason = forms.CharField(widget=forms.Textarea(attrs={"rows": 3}), max_length=2000)

    def clean_reason(self) -> str:
        reason = str(self.cleaned_data["reason"]).strip()
        if not reason:
            raise ValidationError("Say why the invoice is corrected.")
        return reason


class IssueForm(forms.Form):
    """Issuing cannot be undone (a mistake takes a correction, a new version), so the person
    types the invoice's number, as a decommission asks for the resource's name."""

    confirm = forms.CharField(max_length=64, required=False)

    def __init__(self, *args: Any, number: str, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.number = number
        self.fields["confirm"].label = f"Type the number, {number}, to confirm"
        self.fields["confirm"].widget.attrs["autocomplete"] = "off"

    def clean_confirm(self) -> str:
        typed = str(self.cleaned_data["confirm"]).strip()
        if typed != self.number:
            raise ValidationError(f"Type the number {self.number} to confirm; nothing was issued.")
        return typed


class MonthForm(forms.Form):
    month = forms.CharField(max_length=7, help_text="YYYY-MM, a month that is over")

    def clean_month(self) -> date:
        text = str(self.cleaned_data["month"]).strip()
        try:
            month = datetime.strptime(text, "%Y-%m").date()
        except ValueError:
            raise ValidationError(f"{text!r} is not a month like 2026-11") from None
        if invoicing.next_month(month) > invoicing.today_utc():
            raise ValidationError(f"{month:%Y-%m} is not over yet")
        return month


class RangeForm(forms.Form):
    """A range of days for the usage export; the current month by default."""

    start = forms.DateField(required=False)
    end = forms.DateField(required=False, help_text="The last day included")
    MAX_DAYS = 400

    def clean(self) -> dict[str, Any]:
        data = super().clean() or {}
        today = invoicing.today_utc()
        start = data.get("start") or today.replace(day=1)
        end = data.get("end") or today
        if end < start:
            raise ValidationError("The end is before the start.")
        if (end - start).days > self.MAX_DAYS:
            raise ValidationError(f"At most {self.MAX_DAYS} days at a time.")
        data["start_at"] = datetime.combine(start, time(0), tzinfo=UTC)
        data["end_at"] = datetime.combine(end + timedelta(days=1), time(0), tzinfo=UTC)
        data["start"], data["end"] = start, end
        return data
