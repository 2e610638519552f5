"""The command line's faces of the lower layers: `generate`, `import`, `export`, `train`, `routers`.

`agentrt.cli` (the `agentrt` app, with `bench`, `policies`, `presets`) calls each module's
`register_commands(app)`; `serve` and `enginebench` register their own commands from their
packages, which sit at the top. These live here, not in `workloads/`, `predict/` or `cluster/`,
because a command reads files and runs the bench, which those layers sit below.
"""
