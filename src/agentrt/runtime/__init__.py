"""The agent runtime layer: typed events and the observe / score / predict / act policy interface."""
