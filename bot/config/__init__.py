"""The process's configuration: settings read from YAML and the environment and validated once at
start, the registry of pool providers, and log set-up.

Owns: turning text from a config file into typed values, with actionable errors. Must not: reach
Slack or a cluster at import or validation time beyond what a setting names.
"""
