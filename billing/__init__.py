"""Billing: price sheets, the usage ledger, invoices and cost dashboards (see DESIGN)."""
