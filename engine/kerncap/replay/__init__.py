"""VA-faithful replay, timing and validation of a capture (docs/replay.md).

The GPU work happens in a separate server process (`kerncap.replay.server`, using the
native core `kerncap._replay`); the engine talks to it through
`kerncap.replay.client.ReplayClient`; a front end reaches it through an open session (`kerncap.api.open`).
"""
