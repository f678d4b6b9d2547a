"""The control plane: a FastAPI app over the step ledger and the run page (services.api.app)."""
