"""login."""
