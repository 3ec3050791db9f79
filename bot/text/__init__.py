"""Pure text: what people type (the `/scale` command language, schedule arguments) and what they read
(every sentence the bot writes, Slack mrkdwn that outside text cannot turn into markup, the savings
chart).

Owns: parsing and wording. Must not: do I/O (an import contract checks it).
"""
