"""The orchestrator: cascade definition, Celery app, step ledger, advantages, teacher selection."""
