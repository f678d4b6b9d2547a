"""The code sandbox shared by the services that run untrusted programs (reward, env): `sandbox.Sandbox`
(the pool), `isolation` (the fence, rlimits, the sweep), `launcher` (the single-threaded process that
starts runs). Imports nothing at package level: the launcher process loads only the standard library."""
