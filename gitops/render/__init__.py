"""Pure renderers: specs in, Kubernetes objects (plain dicts) and file trees out. No I/O and
nothing from other apps is imported here."""
