"""State machines that turn decoded pgoutput messages into commit-ordered transaction events."""
