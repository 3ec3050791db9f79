"""What scalebot's sleeps saved, from the operation history alone: node-hours (and money, given a
price) per cluster and pool, and when a weekly savings post is due.

Owns: pure figures and due dates. Must not: read the cluster, the store or the clock itself.
"""
