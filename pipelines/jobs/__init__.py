"""The stream jobs esp ships: word count (eSault's experiment) and ad-click analytics."""
