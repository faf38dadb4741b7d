"""Models: the protocol, the litellm client, and offline models (reference, replay)."""
