"""The one verdict table: names <-> reward.proto enum, both ways, and what counts as an error."""

from __future__ import annotations

import pytest

from services.common import verdicts
from services.common.pb import reward_pb2


def test_every_enum_value_but_unspecified_has_one_name_and_back():
    named = {v for v in reward_pb2.Verdict.values() if v != reward_pb2.VERDICT_UNSPECIFIED}
    assert set(verdicts.PB_TO_VERDICT) == named
    for name, value in verdicts.VERDICT_TO_PB.items():
        assert verdicts.from_pb(verdicts.to_pb(name)) == name
        assert reward_pb2.Verdict.Name(value) == f"VERDICT_{name.upper()}"


@pytest.mark.parametrize("value", [reward_pb2.VERDICT_UNSPECIFIED, 99])
def test_unset_or_unknown_reads_as_error_never_as_a_score(value):
    assert verdicts.from_pb(value) == "error" and verdicts.is_error(verdicts.from_pb(value))


def test_only_error_is_an_error():
    assert [n for n in verdicts.VERDICT_TO_PB if verdicts.is_error(n)] == ["error"]
