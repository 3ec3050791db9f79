"""Block Kit renderers as pure functions: operation cards, progress, views and errors, schedule cards
and modals, and the budgeted builder that keeps every message within Slack's limits.

Owns: `Message` values. Must not: call Slack or read the store.
"""
