"""Framework integrations that give zero-code users training steps (imported only when needed)."""
