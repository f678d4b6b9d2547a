"""The `cascade` command. Each group of commands lives in its own module and imports its heavy
dependencies (torch, transformers, celery) only when it runs."""
