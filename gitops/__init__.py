"""GitOps: renderers, checks, the pygit2 repository and change requests (see DESIGN)."""
