"""The env service: multi-turn environments (workbench, swe, python) behind EnvService (env.proto)."""
