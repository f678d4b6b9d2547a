"""GRPO advantages, dynamic filtering, overlong rules, error masking and MOPD's batch against hand-computed tables."""

from __future__ import annotations

import math
import typing

import numpy as np
import pytest

from services.common.errors import InvalidArgument
from services.orchestrator.advantages import (
    OVERLONG_RULES,
    compute_dynamic_filter,
    compute_group_batch,
    compute_grpo_advantages,
    compute_mopd_batch,
)
from services.orchestrator.cascade_config import RolloutStage

S3 = math.sqrt(1 / 3)  # sample std of {1, 0, 0, 1} and of {1, 0, 1}
F, T = False, True


class TestAdvantages:
    @pytest.mark.parametrize(("rewards", "valid", "expected"), [
        # mean 0.5, std (ddof=1) sqrt(1/3): ±0.5 / 0.57735 = ±0.866025
        ([[1, 0, 0, 1]], None, [[0.5 / S3, -0.5 / S3, -0.5 / S3, 0.5 / S3]]),
        # mean 2, std sqrt(2): ±1/1.41421
        ([[3, 1]], None, [[1 / math.sqrt(2), -1 / math.sqrt(2)]]),
        # all equal: zero advantage, no division by zero
        ([[1, 1, 1, 1]], None, [[0, 0, 0, 0]]),
        # an invalid (errored) sample is left out: valid {1, 0, 1} -> mean 2/3, std sqrt(1/3)
        ([[1, 0, 0.5, 1]], [[T, T, F, T]], [[(1 / 3) / S3, (-2 / 3) / S3, 0, (1 / 3) / S3]]),
        # fewer than two valid samples: no advantage at all
        ([[1, 0, 0]], [[T, F, F]], [[0, 0, 0]]),
        # groups are independent
        ([[1, 0], [5, 5]], None, [[1 / math.sqrt(2), -1 / math.sqrt(2)], [0, 0]]),
    ])
    def test_table(self, rewards, valid, expected):
        got = compute_grpo_advantages(np.array(rewards, float), None if valid is None else np.array(valid), eps=0.0)
        np.testing.assert_allclose(got, np.array(expected, float), atol=1e-9)

    def test_eps_is_added_to_the_std(self):
        got = compute_grpo_advantages(np.array([[3.0, 1.0]]), eps=0.5)
        np.testing.assert_allclose(got, [[1 / (math.sqrt(2) + 0.5), -1 / (math.sqrt(2) + 0.5)]])

    @pytest.mark.parametrize(("rewards", "field"), [
        (np.array([1.0, 0.0]), "rewards"),
        (np.array([[1.0, float("nan")]]), "rewards"),
    ])
    def test_bad_input_names_the_field(self, rewards, field):
        with pytest.raises(InvalidArgument) as info:
            compute_grpo_advantages(rewards)
        assert info.value.field == field

    def test_nan_in_an_invalid_sample_is_ignored(self):
        got = compute_grpo_advantages(np.array([[1.0, float("nan"), 0.0]]), np.array([[T, F, T]]), eps=0.0)
        np.testing.assert_allclose(got, [[1 / math.sqrt(2), 0, -1 / math.sqrt(2)]])


class TestDynamicFilter:
    def test_counts_and_kept_indices(self):
        rewards = np.array([[1, 0, 1], [1, 1, 1], [0, 0, 0], [1, 0, 0], [1, 0, 0]], float)
        valid = np.array([[T, T, T], [T, T, T], [T, T, T], [T, F, F], [T, T, F]])
        got = compute_dynamic_filter(rewards, valid)
        assert got.kept.tolist() == [0, 4]
        assert (got.dropped_zero_variance, got.dropped_too_few_valid) == (2, 1)

    def test_a_group_equal_among_its_valid_samples_is_dropped(self):
        got = compute_dynamic_filter(np.array([[1.0, 0.0, 1.0]]), np.array([[T, F, T]]))
        assert got.kept.tolist() == [] and got.dropped_zero_variance == 1


class TestOverlongRules:
    def test_registry_has_exactly_the_config_values(self):
        assert set(OVERLONG_RULES) == set(typing.get_args(RolloutStage.model_fields["overlong"].annotation))

    def test_filter_masks_truncated_but_keeps_them_in_the_group(self):
        out = compute_group_batch(np.array([[1, 0, 1, 0]], float), np.zeros((1, 4), bool),
                                  np.array([[F, F, F, T]]), overlong="filter", eps=0.0)
        np.testing.assert_allclose(out.advantages, [[0.5 / S3, -0.5 / S3, 0.5 / S3, 0]], atol=1e-9)
        assert out.loss_mask.tolist() == [[T, T, T, F]]
        assert out.metrics["overlong_masked"] == 1 and out.metrics["truncated"] == 1

    def test_zero_reward_scores_truncated_zero_and_trains_on_them(self):
        out = compute_group_batch(np.array([[1, 1, 1, 1]], float), np.zeros((1, 4), bool),
                                  np.array([[F, F, T, T]]), overlong="zero_reward", eps=0.0)
        assert out.rewards.tolist() == [[1, 1, 0, 0]]
        np.testing.assert_allclose(out.advantages, [[0.5 / S3, 0.5 / S3, -0.5 / S3, -0.5 / S3]], atol=1e-9)
        assert out.loss_mask.all() and out.metrics["groups_kept"] == 1

    def test_none_leaves_truncated_alone(self):
        out = compute_group_batch(np.array([[1, 0]], float), np.zeros((1, 2), bool),
                                  np.array([[T, T]]), overlong="none", eps=0.0)
        assert out.loss_mask.all() and out.rewards.tolist() == [[1, 0]]

    def test_unknown_rule_names_the_field(self):
        with pytest.raises(InvalidArgument) as info:
            compute_group_batch(np.ones((1, 2)), np.zeros((1, 2), bool), np.zeros((1, 2), bool), overlong="clip")
        assert info.value.field == "overlong"


class TestGroupBatch:
    def test_errors_are_masked_and_counted_never_scored(self):
        rewards = np.array([[1, 0, 0.0, 1], [1, 1, 1, 1], [0, 0.0, 0, 0]], float)
        errored = np.array([[F, F, T, F], [F, F, F, F], [T, T, T, F]])
        out = compute_group_batch(rewards, errored, np.zeros((3, 4), bool), dynamic_filtering=True, eps=0.0)
        np.testing.assert_allclose(out.advantages[0], [(1 / 3) / S3, (-2 / 3) / S3, 0, (1 / 3) / S3], atol=1e-9)
        assert out.loss_mask.tolist() == [[T, T, F, T], [F, F, F, F], [F, F, F, F]]
        m = out.metrics
        assert (m["error_masked"], m["groups_kept"], m["groups_dropped_zero_variance"],
                m["groups_dropped_too_few_valid"], m["trained_samples"]) == (4, 1, 1, 1, 3)
        # reward_mean has one definition (steps.rollouts.reward_metrics, at `scored`), not a second one here
        assert "reward_mean" not in m

    def test_without_dynamic_filtering_zero_variance_groups_stay_with_zero_advantage(self):
        out = compute_group_batch(np.array([[1, 1], [1, 0]], float), np.zeros((2, 2), bool),
                                  np.zeros((2, 2), bool), dynamic_filtering=False, eps=0.0)
        assert out.loss_mask.all() and out.metrics["groups_kept"] == 2
        np.testing.assert_allclose(out.advantages, [[0, 0], [1 / math.sqrt(2), -1 / math.sqrt(2)]], atol=1e-9)

    def test_shapes_must_match(self):
        with pytest.raises(InvalidArgument) as info:
            compute_group_batch(np.ones((2, 2)), np.zeros((2, 3), bool), np.zeros((2, 2), bool))
        assert info.value.field == "errored"


class TestMopdBatch:
    """compute_mopd_batch: which samples the distillation loss learns from, and the outcome advantage."""

    EMPTY = np.array([[F, F, T, F]])
    TRUNC = np.array([[F, T, F, F]])

    @pytest.mark.parametrize(("overlong", "mask"), [
        ("none", [[T, T, F, T]]),          # only the empty completion goes
        ("zero_reward", [[T, T, F, T]]),   # no reward to zero without grpo_alpha: the truncated one stays
        ("filter", [[T, F, F, T]]),        # the truncated one goes too
    ])
    def test_pure_distillation_masks_empty_and_filtered_samples(self, overlong, mask):
        out = compute_mopd_batch(self.EMPTY, self.TRUNC, overlong)
        assert out.loss_mask.tolist() == mask and out.advantages is None
        assert (out.metrics["trained_samples"], out.metrics["empty"], out.metrics["truncated"]) == (sum(mask[0]), 1, 1)

    @pytest.mark.parametrize(("overlong", "mask", "advantages"), [
        # rewards 1, 1, 0 | sample 3 errored (out of the group and the mask): mean 2/3, std sqrt(1/3)
        ("none", [[T, T, T, F]], [[(1 / 3) / S3, (1 / 3) / S3, (-2 / 3) / S3, 0]]),
        # zero_reward: the truncated sample 1 scores 0 -> rewards 1, 0, 0: mean 1/3, std sqrt(1/3)
        ("zero_reward", [[T, T, T, F]], [[(2 / 3) / S3, (-1 / 3) / S3, (-1 / 3) / S3, 0]]),
        # filter: rewards unchanged in the statistics, the truncated sample 1 leaves the mask
        ("filter", [[T, F, T, F]], [[(1 / 3) / S3, 0, (-2 / 3) / S3, 0]]),
    ])
    def test_outcome_advantage_masks_errors_and_follows_the_overlong_rule(self, overlong, mask, advantages):
        rewards = np.array([[1.0, 1.0, 0.0, 0.0]])
        errored = np.array([[F, F, F, T]])
        out = compute_mopd_batch(np.zeros((1, 4), bool), self.TRUNC, overlong, rewards, errored, eps=0.0)
        assert out.loss_mask.tolist() == mask
        np.testing.assert_allclose(out.advantages, advantages, atol=1e-9)
        assert out.metrics["trained_samples"] == sum(mask[0]) and out.metrics["error_masked"] == 1

    def test_an_empty_completion_leaves_the_mask_with_rewards_too(self):
        out = compute_mopd_batch(self.EMPTY, np.zeros((1, 4), bool), "none", np.array([[1.0, 0.0, 1.0, 0.0]]),
                                 np.zeros((1, 4), bool), eps=0.0)
        assert out.loss_mask.tolist() == [[T, T, F, T]] and out.advantages[0, 2] == 0.0

    def test_unknown_rule_and_shapes_name_the_field(self):
        with pytest.raises(InvalidArgument) as info:
            compute_mopd_batch(self.EMPTY, self.TRUNC, "clip")
        assert info.value.field == "overlong"
        with pytest.raises(InvalidArgument) as info:
            compute_mopd_batch(self.EMPTY, np.zeros((1, 3), bool))
        assert info.value.field == "truncated"
