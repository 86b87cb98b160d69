"""Timestamps: the cached formatting writes exactly what datetime would."""

from __future__ import annotations

from datetime import UTC, datetime

from hypothesis import given
from hypothesis import strategies as st

from gateway.base.times import iso, iso_utc, month_of

EPOCHS = st.floats(min_value=-2e9, max_value=4e9, allow_nan=False, allow_infinity=False)


@given(st.lists(EPOCHS, min_size=1, max_size=20))
def test_iso_utc_matches_datetime_whatever_came_before(epochs: list[float]) -> None:
    for epoch in epochs:  # in sequence: the cached second of one must not leak to the next
        assert iso_utc(epoch) == iso(datetime.fromtimestamp(epoch, UTC))


@given(st.lists(EPOCHS, min_size=1, max_size=20))
def test_month_of_matches_datetime_whatever_came_before(epochs: list[float]) -> None:
    for epoch in epochs:
        assert month_of(epoch) == datetime.fromtimestamp(epoch, UTC).strftime("%Y-%m")


def test_month_and_second_boundaries() -> None:
    new_year = datetime(2027, 1, 1, tzinfo=UTC).timestamp()
    assert month_of(new_year - 0.000001) == "2026-12"
    assert month_of(new_year) == "2027-01"
    assert month_of(-86400 * 10) == "1969-12"
    assert month_of(-1e-265) == "1970-01"  # datetime rounds it to the next month's first µs
    assert iso_utc(new_year - 0.0000004) == "2027-01-01T00:00:00.000000Z"  # rounds up a second
    assert iso_utc(new_year - 0.000001) == "2026-12-31T23:59:59.999999Z"
