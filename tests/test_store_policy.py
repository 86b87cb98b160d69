"""The account rules themselves (gateway.store.policy), as pure functions. The stores and the
quotas that apply them are held to them in tests/test_store_contract.py."""

from __future__ import annotations

import pytest

from gateway.store import Charge, User, policy
from gateway.store.policy import Standing


def user(credits: int, minutes: int) -> User:
    return User("alice", "free", credits, minutes, "2026-01-01T00:00:00Z", "2026-01")


def test_grants_top_up_and_never_take_away() -> None:
    assert policy.opening_grant(0, 0) is None
    assert policy.opening_grant(100, 5) == Charge("grant", "", 0, 0, -100, -5)
    assert policy.top_up(user(40, 50), 100, 30, "monthly_grant") == Charge(
        "monthly_grant", "", 0, 0, -60, 0)
    assert policy.top_up(user(-7, 0), 100, 0, "plan_grant") == Charge(
        "plan_grant", "", 0, 0, -107, 0)
    assert policy.top_up(user(500, 30), 100, 30, "monthly_grant") is None
    assert policy.opening_period("", "2026-03-04T05:06:07Z") == "2026-03"
    assert policy.opening_period("2026-01", "2026-03-04T05:06:07Z") == "2026-01"


@pytest.mark.parametrize(("left", "asked", "taken"), [
    (10, 3, 3), (2, 3, 2), (0, 3, 0), (-4, 3, 0)])
def test_minutes_are_taken_only_as_far_as_the_balance_holds(left: int, asked: int,
                                                             taken: int) -> None:
    assert policy.minutes_to_take(left, asked) == taken


def test_credits_low_is_a_fall_under_the_threshold_once() -> None:
    assert policy.low_credits_threshold(1000) == 100
    assert policy.low_credits_threshold(0) is None
    assert policy.low_credits_window(100, 15) == (85, 99)
    assert policy.low_credits_window(100, 0) is None
    assert policy.low_credits_window(None, 15) is None
    falls = [after for after in range(70, 110) if policy.fell_under(100, after, 15)]
    assert falls == list(range(85, 100))  # from 100..114 to under 100


def test_the_rate_window() -> None:
    assert policy.rate_check([], 100.0, 0) == policy.RateVerdict(True, False, 0.0)
    assert policy.rate_check([50.0], 100.0, 2) == policy.RateVerdict(True, True, 0.0)
    refused = policy.rate_check([50.0, 90.0], 100.0, 2)
    assert (refused.ok, refused.counted) == (False, False)
    assert refused.retry_after == pytest.approx(10.0)
    assert policy.rate_check([40.0, 90.0], 100.0, 2).ok  # 40 is out of the window
    assert policy.rate_check([40.0, 40.0], 100.0, 1).ok
    assert policy.rate_check([40.000001, 90.0], 100.0, 2).retry_after == pytest.approx(
        policy.MIN_RETRY_SECONDS)
    assert policy.counted_plans({"free": 20, "team": 0}) == ["free"]


def test_credit_holds() -> None:
    assert policy.hold_check(100, 0, 99) is Standing.HELD
    assert policy.hold_check(100, 0, 100) is Standing.BUSY
    assert policy.hold_check(100, 60, 40) is Standing.BUSY
    assert policy.hold_check(100, 100, 0) is Standing.SPENT
    assert policy.hold_check(-5, 0, 0) is Standing.SPENT
    assert policy.hold_after(True, 33, 53) == 53
    assert policy.hold_after(False, 33, 53) == 33  # a refused call keeps what its turn held
    holds = {"a": [33, 200.0], "b": [20, 200.0], "dead": [50, 99.0]}
    assert policy.held_by_others(holds, "a", 100.0) == 20  # its own and expired ones aside


def test_a_claim_is_a_request_then_a_hold() -> None:
    holds = {"other": [60, 200.0]}
    claimed = policy.judge_claim(policy.Account(100, "free", [], holds), "mine", 0, {"free": 1},
                                 100.0)
    assert (claimed.rate_ok, claimed.held, claimed.balance) == (True, True, 100)
    over = policy.judge_claim(policy.Account(100, "free", [90.0], holds), "mine", 0, {"free": 1},
                              100.0)
    assert (over.rate_ok, over.held) == (False, False)  # over the limit: no hold either
    assert over.retry_after == pytest.approx(50.0)
    busy = policy.judge_claim(policy.Account(100, "free", [90.0], holds), "mine", 40, None, 100.0)
    assert (busy.rate_ok, busy.held) == (True, False)  # not counted; 100 - 40 - 60 = 0
