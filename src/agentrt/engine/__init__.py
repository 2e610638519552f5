"""The serving-engine simulator: presets, cost model, replay, batching and metrics."""
