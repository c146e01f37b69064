"""The rate limiter's arithmetic, in memory and in a real Redis (database
TEST_REDIS_DB): bursts, the rate, in-flight slots, released and expired
slots, each bucket on its own, and nothing checked when no quota applies."""

from __future__ import annotations

import time
import uuid

import pytest
import redis

from inference.admission.ratelimit import NOTHING, Defaults, MemoryStore, RateLimiter, RedisStore
from inference.ports import ANONYMOUS, Principal, Quota
from inference.protocol.errors import RateLimited
from tests.conftest import TEST_REDIS_URL


@pytest.fixture(params=["memory", "redis"])
def store(request):
    if request.param == "memory":
        return MemoryStore()
    client = redis.Redis.from_url(TEST_REDIS_URL)
    return RedisStore(client, prefix=f"test:ratelimit:{uuid.uuid4().hex}:", lease_seconds=0.5)


def team(name: str = "ml", **quota) -> Principal:
    return Principal(name, f"tok-{name}", tuple(quota.items()))


def test_a_burst_then_the_rate(store):
    limiter = RateLimiter(Defaults(team=Quota(rate=20, burst=3)), store)
    for _ in range(3):
        limiter.admit(team()).release()
    with pytest.raises(RateLimited) as info:
        limiter.admit(team())
    assert 0 < info.value.retry_after <= 0.06 and info.value.retry_after_header == "1"
    assert "team ml may send 20 requests per second (bursts of 3)" in info.value.message
    time.sleep(0.06)  # one more request's worth of time at 20/s
    limiter.admit(team())
    with pytest.raises(RateLimited):
        limiter.admit(team())


def test_teams_and_tokens_are_counted_apart(store):
    limiter = RateLimiter(Defaults(team=Quota(rate=1, burst=1), token=Quota(rate=1, burst=2)), store)
    limiter.admit(team("a"))
    with pytest.raises(RateLimited):
        limiter.admit(team("a"))
    limiter.admit(team("b"))  # another team's bucket is full
    # A team's own quota (operators') replaces the default's fields it sets: burst 10 here,
    # so the token's own bucket (burst 2) is the one that refuses.
    own = Principal("d", "tok-d", (("burst", 10),))
    limiter.admit(own)
    limiter.admit(own)
    with pytest.raises(RateLimited) as info:
        limiter.admit(own)
    assert "this API token" in info.value.message
    limiter.admit(Principal("d", "tok-d2", (("burst", 10),)))  # the team's third: within its burst of 10


def test_in_flight_slots(store):
    limiter = RateLimiter(Defaults(team=Quota(in_flight=2)), store)
    first, second = limiter.admit(team()), limiter.admit(team())
    assert first.holds
    with pytest.raises(RateLimited) as info:
        limiter.admit(team())
    assert "may have 2 inferences in flight" in info.value.message and info.value.retry_after == 1.0
    first.release()
    first.release()  # twice: frees one slot once
    with limiter.admit(team()):
        with pytest.raises(RateLimited):
            limiter.admit(team())
    second.release()


def test_a_refused_call_takes_nothing(store):
    limiter = RateLimiter(Defaults(team=Quota(rate=1, burst=1, in_flight=5), token=Quota(in_flight=1)), store)
    held = limiter.admit(team())
    with pytest.raises(RateLimited):
        limiter.admit(team())  # refused by the token's in-flight cap or the team's rate
    held.release()
    time.sleep(1.05)
    limiter.admit(team()).release()  # the refused call took neither a slot nor a request of the rate


def test_slots_of_a_dead_process_expire_in_redis():
    store = RedisStore(
        redis.Redis.from_url(TEST_REDIS_URL), prefix=f"test:ratelimit:{uuid.uuid4().hex}:", lease_seconds=0.3
    )
    limiter = RateLimiter(Defaults(team=Quota(in_flight=1)), store)
    limiter.admit(team())  # never released
    with pytest.raises(RateLimited):
        limiter.admit(team())
    time.sleep(0.35)
    limiter.admit(team()).release()


def test_nothing_is_checked_without_a_quota():
    class Refuses:
        blocking = True

        def acquire(self, *args):
            raise AssertionError("asked the store")

    limiter = RateLimiter(Defaults(token=Quota(rate=5)), Refuses())
    assert limiter.buckets(ANONYMOUS) == [] and limiter.admit(ANONYMOUS) is NOTHING
    assert not limiter.blocks_for(ANONYMOUS)
    assert [b.limit for b in limiter.buckets(team())] == ["token"]


def test_anonymous_callers_share_one_bucket(store):
    limiter = RateLimiter(Defaults(anonymous=Quota(rate=1, burst=2)), store)
    limiter.admit(ANONYMOUS)
    limiter.admit(ANONYMOUS)
    with pytest.raises(RateLimited) as info:
        limiter.admit(ANONYMOUS)
    assert "anonymous callers" in info.value.message
    limiter.admit(team())  # a token's calls are not anonymous


def test_a_store_that_fails_admits():
    class Broken:
        blocking = True

        def acquire(self, *args):
            raise redis.ConnectionError("away")

    limiter = RateLimiter(Defaults(team=Quota(rate=1)), Broken())
    assert limiter.admit(team()) is NOTHING


def test_a_token_with_no_team_to_charge_is_charged_to_its_users_own_bucket(store):
    """A user in no team (or in several, none owning the model) is a team of
    one: the team defaults limit their tokens together, apart from other users."""
    limiter = RateLimiter(Defaults(team=Quota(rate=1, burst=2)), store)
    alone = Principal("", "tok-x1", user="7", user_name="xavier")
    assert [(b.key, b.limit, b.quota) for b in limiter.buckets(alone)] == [("user:7", "user", Quota(rate=1, burst=2))]
    limiter.admit(alone)
    limiter.admit(Principal("", "tok-x2", user="7", user_name="xavier"))  # another token of the same user
    with pytest.raises(RateLimited) as info:
        limiter.admit(alone)
    assert "user xavier (no team of theirs owns this model) may send 1 requests per second" in info.value.message
    limiter.admit(Principal("", "tok-y", user="8", user_name="yvonne"))  # another user: another bucket
    limiter.admit(team("ml"))  # and a team's bucket is its own


def test_no_user_bucket_without_a_team_default():
    limiter = RateLimiter(Defaults(token=Quota(rate=5), anonymous=Quota(rate=1)))
    assert [b.limit for b in limiter.buckets(Principal("", "tok-x", user="7"))] == ["token"]


# -- a call's cost (issue 34 T4: an N-step ensemble costs N) ------------------------------
def test_a_call_costs_its_cost_all_or_nothing(store):
    """2/s, bursts of 5: a call costing 3 fits; a second costing 3 finds 2
    left: refused, to retry in one interval (0.5 s), having taken nothing
    (a call costing 2 still fits, then the bucket is empty)."""
    limiter = RateLimiter(Defaults(team=Quota(rate=2, burst=5)), store)
    limiter.admit(team(), cost=3)
    with pytest.raises(RateLimited) as info:
        limiter.admit(team(), cost=3)
    assert 0.4 < info.value.retry_after <= 0.5
    limiter.admit(team(), cost=2)
    with pytest.raises(RateLimited):
        limiter.admit(team())


def test_an_admitted_call_charged_more(store):
    """2/s, bursts of 5: a call admitted (1) and charged 3 more leaves 1; the
    next call, admitted for that 1, cannot be charged 3 more: refused,
    counted, with when the whole call (4) fits: 2 s; the refused charge
    took nothing (after one interval, one request fits, and only one)."""
    limiter = RateLimiter(Defaults(team=Quota(rate=2, burst=5)), store)
    first = limiter.admit(team())
    assert first.charge_blocks is isinstance(store, RedisStore)
    first.charge(3, "a request to ensemble 'e' (4 steps)")
    second = limiter.admit(team())
    with pytest.raises(RateLimited) as info:
        second.charge(3, "a request to ensemble 'e' (4 steps)")
    assert info.value.message.startswith(
        "rate limit: team ml may send 2 requests per second (bursts of 5); "
        "a request to ensemble 'e' (4 steps) costs 4 requests; retry after"
    )
    assert 1.9 < info.value.retry_after <= 2.0
    time.sleep(0.5)
    limiter.admit(team())
    with pytest.raises(RateLimited):
        limiter.admit(team())
    NOTHING.charge(5)  # a call with no rate limit: nothing to charge
    RateLimiter(Defaults(team=Quota(in_flight=3)), store).admit(team("capped")).charge(5)  # a cap, no rate


def test_a_call_costing_more_than_the_burst_needs_a_full_bucket_and_leaves_a_debt(store):
    """4/s, bursts of 2: a call costing 6 waits for a full bucket (never
    refused for ever), then leaves the bucket 4 requests in debt: the next
    call waits 1.25 s. An admitted call charged past the burst likewise."""
    limiter = RateLimiter(Defaults(team=Quota(rate=4, burst=2)), store)
    limiter.admit(team())
    with pytest.raises(RateLimited) as info:
        limiter.admit(team(), cost=6)
    assert 0.15 < info.value.retry_after <= 0.25
    time.sleep(info.value.retry_after + 0.01)
    limiter.admit(team(), cost=6)
    with pytest.raises(RateLimited) as info:
        limiter.admit(team())
    assert 1.1 < info.value.retry_after <= 1.25
    other = limiter.admit(team("other"))  # a full bucket: admitted for 1, charged 5 more
    other.charge(5)
    with pytest.raises(RateLimited) as info:
        limiter.admit(team("other"))
    assert 1.1 < info.value.retry_after <= 1.25
