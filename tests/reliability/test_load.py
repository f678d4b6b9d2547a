"""Load: more concurrent calls than a service admits get RESOURCE_EXHAUSTED, not memory growth.

The reward service admits 8 pending items; 200 Score calls of 4 items, 32 at a time, must be
answered (OK or RESOURCE_EXHAUSTED, nothing else), some refused, with the process's RSS back near
where it started. Policy and teacher admit 2 concurrent calls; a burst of 8 is partly refused.
"""

from __future__ import annotations

import numpy as np
import pytest

from services.common import codec
from services.common.pb import policy_pb2, teacher_pb2
from tests.reliability.probes import burst, load_reward

pytestmark = [pytest.mark.integration, pytest.mark.slow]


def test_the_reward_service_pushes_back_instead_of_growing(services):
    sup, specs = services
    result = load_reward(specs["reward"].grpc_address, sup.pid("reward"), requests=200, concurrency=32)
    assert set(result.codes) <= {"OK", "RESOURCE_EXHAUSTED"}, result.codes
    assert result.codes["OK"] >= 1 and result.codes["RESOURCE_EXHAUSTED"] >= 1, result.codes
    assert result.rss_after_mb < result.rss_before_mb + 64, (result.rss_before_mb, result.rss_after_mb)
    assert result.percentile(99) < 30.0


@pytest.mark.parametrize("name", ["policy", "teacher"])
def test_policy_and_teacher_admit_a_bounded_number_of_calls(services, name):
    _sup, specs = services
    if name == "policy":
        request = policy_pb2.GenerateRequest(prompts=[policy_pb2.Prompt(token_ids=np.array([5, 6], "<i4").tobytes())],
                                             n=16, sampling=policy_pb2.SamplingParams(max_tokens=24, temperature=1.0))
        method, response = "/cascade.v1.PolicyService/Generate", policy_pb2.GenerateResponse
    else:
        request = teacher_pb2.ScoreTokensRequest(domain="mcqa", prompt_ids=codec.encode([[5] * 40], "int32"),
                                                 completion_ids=codec.encode([[6] * 60] * 16, "int32"),
                                                 prompt_index=[0] * 16)
        method, response = "/cascade.v1.TeacherService/ScoreTokens", teacher_pb2.ScoreTokensResponse
    codes = burst(specs[name].grpc_address, method, request, response, concurrency=8)
    assert set(codes) <= {"OK", "RESOURCE_EXHAUSTED"}, codes
    assert codes["OK"] >= 1 and codes["RESOURCE_EXHAUSTED"] >= 1, codes


def test_a_request_above_the_policy_sample_bound_is_refused_by_name(services):
    import grpc

    _sup, specs = services
    request = policy_pb2.GenerateRequest(prompts=[policy_pb2.Prompt(token_ids=np.array([5], "<i4").tobytes())] * 10,
                                         n=8, sampling=policy_pb2.SamplingParams(max_tokens=2))
    with grpc.insecure_channel(specs["policy"].grpc_address) as ch:
        call = ch.unary_unary("/cascade.v1.PolicyService/Generate", request_serializer=policy_pb2.GenerateRequest.SerializeToString,
                              response_deserializer=policy_pb2.GenerateResponse.FromString)
        with pytest.raises(grpc.RpcError) as err:
            call(request, timeout=30)
    assert err.value.code() == grpc.StatusCode.INVALID_ARGUMENT and "max_request_samples" in err.value.details()
