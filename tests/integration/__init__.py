"""End-to-end tests: accelerate-style scripts started every supported way."""
