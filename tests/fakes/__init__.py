"""Hand-written fakes for tests: small real implementations that extend production classes, no mocks."""
