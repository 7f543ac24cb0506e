"""Trust policies from imagined × real outcome counts: thresholds, pooling, pins and the table."""

from __future__ import annotations

import pytest

from rehearsal_gateway.rehearsal.trust import (
    POOLED,
    Counts,
    TrustSettings,
    cell,
    policies,
    policy_for,
    trust_row,
)

SETTINGS = TrustSettings(min_samples=8)


@pytest.mark.parametrize(
    ("imagined_error", "real_error", "expected"),
    [(True, True, "ee"), (True, False, "eo"), (False, True, "oe"), (False, False, "oo")],
)
def test_each_pair_lands_in_its_cell(imagined_error: bool, real_error: bool, expected: str) -> None:
    """The four cells of imagined × real outcome."""
    assert cell(imagined_error, real_error) == expected


@pytest.mark.parametrize(
    ("imagined_error", "real_error", "expected"),
    [(True, True, "we"), (True, False, "wo"), (False, True, "oe"), (False, False, "oo")],
)
def test_a_weighed_veto_lands_in_its_own_cells(
    imagined_error: bool, real_error: bool, expected: str
) -> None:
    """A veto the commit rule weighed is kept apart; an imagined success is a success either way."""
    assert cell(imagined_error, real_error, weighed=True) == expected


def test_weighed_vetoes_count_for_agreement_not_for_precision() -> None:
    """Agreement and the false-veto rate take every pair; precision only the unselected vetoes."""
    counts = Counts(ee=1, eo=1, oe=1, oo=5, we=1, wo=1)
    assert (counts.samples, counts.agreement) == (10, 0.7)
    assert counts.veto_precision == 0.5
    assert counts.false_veto_rate == pytest.approx(2 / 7)
    assert Counts(we=3, wo=1).veto_precision is None


def test_rates_follow_the_counts() -> None:
    """Agreement, veto precision and false-veto rate; None when undefined."""
    counts = Counts(ee=3, eo=1, oe=2, oo=4)
    assert (counts.samples, counts.agreement) == (10, 0.7)
    assert (counts.veto_precision, counts.false_veto_rate) == (0.75, 0.2)
    assert counts.miss_rate == pytest.approx(1 / 3)
    assert counts.veto_lift == pytest.approx(0.75 - 1 / 3)
    empty = Counts()
    assert (empty.agreement, empty.veto_precision, empty.false_veto_rate) == (None, None, None)
    assert (empty.miss_rate, empty.veto_lift) == (None, None)
    assert Counts(ee=2, eo=2).veto_lift == 0.5  # no imagined success yet: the miss rate reads 0


def test_stored_fields_are_read_leniently() -> None:
    """Missing, negative or non-numeric fields read as zero."""
    counts = Counts.from_mapping({"ee": "4", "eo": -2, "oe": "x", "oo": None})
    assert counts == Counts(ee=4)


@pytest.mark.parametrize(
    ("counts", "policy"),
    [
        pytest.param(Counts(ee=2, oo=5), "learning", id="too-few"),
        pytest.param(Counts(ee=3, eo=0, oe=1, oo=8), "trusted", id="agreeing"),
        pytest.param(Counts(ee=1, eo=2, oe=0, oo=9), "trusted", id="few-vetoes-agreement"),
        pytest.param(Counts(ee=0, eo=0, oe=3, oo=6), "ignore_vetoes", id="low-agreement"),
        # fidelity 0.8 as measured: vetoes right 56% of the time, imagined successes fail 3%
        pytest.param(Counts(ee=9, eo=7, oe=4, oo=151), "trusted", id="lifting-vetoes"),
        # imagination that knows nothing: vetoed and clean-imagined calls fail alike
        pytest.param(Counts(ee=3, eo=3, oe=10, oo=10), "ignore_vetoes", id="no-lift"),
        pytest.param(Counts(ee=4, eo=1, oe=4, oo=2), "ignore_vetoes", id="small-ratio"),
        # fidelity 0 as measured (sequential, skill 0.5): a lift of 0.22, but a ratio of 1.7
        pytest.param(Counts(ee=21, eo=19, oe=19, oo=43), "ignore_vetoes", id="fidelity-0"),
        # fidelity 0.8, skill 0.8: a lift of only 0.25, yet vetoes 11x likelier right than misses
        pytest.param(Counts(ee=3, eo=8, oe=4, oo=159), "trusted", id="rare-errors"),
        pytest.param(Counts(ee=1, eo=19, oe=0, oo=20), "ignore_vetoes", id="tiny-lift"),
        pytest.param(Counts(ee=0, eo=3, oe=4, oo=3), "off", id="worse-than-chance"),
    ],
)
def test_policy_from_a_tools_own_counts(counts: Counts, policy: str) -> None:
    """Enough vetoes decide by their lift, fewer by agreement; too few samples mean learning."""
    assert policy_for("get_order", {"get_order": counts}, SETTINGS)[0] == policy


def test_a_new_tool_borrows_the_tenants_pooled_verdict() -> None:
    """With few results of its own, a tool follows the tenant's pooled counts."""
    table = {"get_order": Counts(ee=1), POOLED: Counts(ee=0, eo=5, oe=5, oo=2)}
    policy, why = policy_for("get_order", table, SETTINGS)
    assert policy == "off"
    assert "overall" in why


def test_a_tool_with_few_vetoes_borrows_the_tenants_veto_lift() -> None:
    """Two right vetoes and three misses: too few vetoes of its own; the pooled lift decides."""
    own = Counts(ee=2, eo=0, oe=3, oo=8)  # agreement 0.77: ignored by agreement alone
    lifting = {"t": own, POOLED: Counts(ee=17, eo=7, oe=12, oo=156)}
    policy, why = policy_for("t", lifting, SETTINGS)
    assert (policy, why) == (
        "trusted",
        "13 real results of t: veto lift 0.64, precision 0.71 vs miss rate 0.07"
        " (the tenant's vetoes)",
    )
    flat = {"t": own, POOLED: Counts(ee=3, eo=3, oe=10, oo=10)}
    assert policy_for("t", flat, SETTINGS)[0] == "ignore_vetoes"
    few = {"t": own, POOLED: Counts(ee=1, oe=6, oo=12)}
    assert policy_for("t", few, SETTINGS) == (
        "ignore_vetoes",
        "13 real results of t: outcome agreement 0.77 (0.74 with the tenant's),"
        " too few vetoes for a lift",
    )


def test_a_tools_few_pairs_are_drawn_towards_the_tenants_agreement() -> None:
    """7 of 9 pairs right (0.78) is noise next to a tenant right 94 times in 100: trusted."""
    table = {"t": Counts(oe=1, oo=7, wo=1), POOLED: Counts(oe=3, oo=94, wo=3)}
    assert policy_for("t", table, SETTINGS) == (
        "trusted",
        "9 real results of t: outcome agreement 0.78 (0.85 with the tenant's),"
        " too few vetoes for a lift",
    )
    alone = {"t": Counts(oe=1, oo=7, wo=1)}  # the tool is all the tenant has seen
    assert policy_for("t", alone, SETTINGS)[0] == "ignore_vetoes"


@pytest.mark.parametrize(
    ("counts", "policy", "why"),
    [
        # fidelity 0.8 as measured by the benchmark: every veto it could count was weighed
        pytest.param(
            Counts(ee=0, eo=0, oe=3, oo=60, we=4, wo=1),
            "trusted",
            "veto lift 0.75, precision 0.80 vs miss rate 0.05, weighed vetoes included",
            id="weighed-confirm-a-lift",
        ),
        pytest.param(
            Counts(ee=0, eo=0, oe=3, oo=60, we=0, wo=5),
            "trusted",
            "outcome agreement 0.88, too few vetoes for a lift, weighed vetoes show none",
            id="weighed-cannot-refute",
        ),
        pytest.param(
            Counts(ee=0, eo=4, oe=3, oo=60, we=5, wo=0),
            "ignore_vetoes",
            "veto lift -0.05, precision 0.00 vs miss rate 0.05",
            id="unselected-decide",
        ),
    ],
)
def test_weighed_vetoes_can_confirm_a_lift_but_never_refute_one(
    counts: Counts, policy: str, why: str
) -> None:
    """Too few unselected vetoes: the weighed ones, biased towards false, may only show a lift."""
    assert policy_for("t", {"t": counts}, SETTINGS) == (
        policy,
        f"{counts.samples} real results of t: {why}",
    )


def test_a_tool_borrows_the_tenants_weighed_vetoes_too() -> None:
    """A tool with no vetoes of its own is judged by the tenant's, weighed ones included."""
    table = {"t": Counts(oe=1, oo=8), POOLED: Counts(oe=2, oo=40, we=4)}
    assert policy_for("t", table, SETTINGS) == (
        "trusted",
        "9 real results of t: veto lift 0.95, precision 1.00 vs miss rate 0.05,"
        " weighed vetoes included (the tenant's vetoes)",
    )


def test_pins_disabled_and_auto_off() -> None:
    """A pin wins; trust disabled means trusted; without auto_off, low agreement only ignores."""
    table = {"t": Counts(eo=5, oe=5)}
    pinned = TrustSettings(pins={"t": "trusted"})
    assert policy_for("t", table, pinned) == ("trusted", "pinned by the operator")
    assert policy_for("t", table, TrustSettings(enabled=False))[0] == "trusted"
    no_off = TrustSettings(auto_off=False, min_samples=8)
    assert policies(["t", "u"], table, no_off) == {"t": "ignore_vetoes", "u": "learning"}


def test_a_trust_row_explains_itself() -> None:
    """The row of GET /v1/rehearsals/trust: counts, rates and the policy with its reason."""
    row = trust_row("t", {"t": Counts(ee=4, oo=4)}, SETTINGS)
    assert row == {
        "tool": "t",
        "samples": 8,
        "counts": {"ee": 4, "eo": 0, "oe": 0, "oo": 4, "we": 0, "wo": 0},
        "outcome_agreement": 1.0,
        "veto_precision": 1.0,
        "miss_rate": 0.0,
        "veto_lift": 1.0,
        "false_veto_rate": 0.0,
        "policy": "trusted",
        "why": "8 real results of t: veto lift 1.00, precision 1.00 vs miss rate 0.00",
    }
    assert trust_row("u", {}, SETTINGS)["outcome_agreement"] is None
