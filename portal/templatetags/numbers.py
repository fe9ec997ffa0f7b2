"""Numbers people read: two decimals, thousands separated, the unit named.

``{{ value|num }}`` prints 35,458.68; ``{{ value|amount:"EUR" }}`` 35,458.68 EUR;
``{{ value|gpus }}`` 3.03 GPUs. Unit prices keep four decimals with ``|num:4`` inside
``<span class="unit-price">`` (tests/portal/test_numbers_walk.py leaves those out of its check).
Anything that is not a number is printed as it is, so a blank or a dash stays one.
"""

from __future__ import annotations

from decimal import ROUND_HALF_UP, Decimal, InvalidOperation

from django import template

register = template.Library()


def _decimal(value: object) -> Decimal | None:
    if value is None or value == "" or isinstance(value, bool):
        return None
    try:
        number = Decimal(str(value))
    except InvalidOperation:
        return None
    return number if number.is_finite() else None


@register.filter
def num(value: object, places: int = 2) -> object:
    """The number rounded half up to ``places`` decimals, with thousands separators."""
    number = _decimal(value)
    if number is None:
        return value
    places = int(places)
    rounded = number.quantize(Decimal(1).scaleb(-places), rounding=ROUND_HALF_UP)
    return f"{rounded:,.{places}f}"


@register.filter
def amount(value: object, unit: str = "") -> object:
    """Two decimals and the unit: ``35,458.68 EUR``."""
    text = num(value)
    if text is value or not unit:
        return text
    return f"{text} {unit}"


@register.filter
def gpus(value: object) -> object:
    """A GPU amount, fractions of MIG slices included: ``3.03 GPUs``."""
    text = num(value)
    if text is value:
        return text
    return f"{text} GPU" if _decimal(value) == 1 else f"{text} GPUs"


@register.filter
def percent(value: object) -> object:
    """A share (0.9) as a percentage with two decimals: ``90.00 %``."""
    number = _decimal(value)
    if number is None:
        return value
    return f"{num(number * 100)} %"
