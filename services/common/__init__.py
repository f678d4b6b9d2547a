"""Code shared by every service: generated contracts, array codec, gRPC helpers, settings,
metrics, model loading. Nothing here imports a service."""
