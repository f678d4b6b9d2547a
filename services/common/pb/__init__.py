"""Generated gRPC stubs of proto/cascade/v1 (python -m services.common.protogen). Do not edit."""
