"""Cascade: post-training as independent gRPC services (policy, teacher, reward, trainer)
coordinated by Celery (orchestrator), with a FastAPI control plane (api)."""
