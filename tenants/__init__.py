"""Tenants, memberships, roles, sign-in adapters and the audit log."""
