"""The benchmark scripts, each run from the repository root as `python -m benchmarks.NAME`.

Scripts: `python -m benchmarks.NAME --help` says what each measures and writes. Shared helpers
(not run on their own): results.py (docs and JSON writing, the workload tables), router_setup.py
(the routers' settings), tails.py, regimes.py, sched_runs.py, fake_upstream.py,
live_admission_report.py, trace_mutations.py (the fuzzers' malformed traces) and the parts the
larger scripts are split into. gpu/run.py is the prepared GPU check (`python -m benchmarks.gpu.run`).
"""
