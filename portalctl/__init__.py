"""portalctl: the portal's command-line client (``portalctl --help``).

A client of the REST API only: it imports no Django and nothing of the portal's apps, so it
runs anywhere Python and ``requests`` do (a laptop, a CI job in a tenant's own repository).
"""
