"""VA-faithful replay, timing and validation of a capture (docs/replay.md).

The GPU work happens in a separate server process (`kerncap.replay.server`, using the
native core `kerncap._replay`); the engine talks to it through
`kerncap.replay.client.ReplayClient`; `kerncap.api.replay`/`validate` are the one-shot forms.
"""
