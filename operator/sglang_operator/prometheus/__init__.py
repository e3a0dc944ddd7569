"""Prometheus' HTTP API as the operator reads it: the client and its queries of SGLang's series, the credentials a
CR or the operator names, and which Prometheus a CR may be read from. The autoscaler and the fleet doctor both read
through it, so both obey the same allow-list and credentials; like `router/`, it only fetches and sends.
"""
