"""The one Slack writer: every chat.postMessage, chat.update and chat.postEphemeral goes through the
sender, which paces, retries and remembers (outbox) across a restart; live progress turns operation
events into one edited parent message plus thread replies.

Owns: getting messages to Slack in order, within its rate limits. Must not: render or decide.
"""
