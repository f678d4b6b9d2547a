"""RewardService: every domain's verifier, the code sandbox and reward-model scoring."""
