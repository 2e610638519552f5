"""Several simulated replicas behind a router: the router interface (`routing`), the routers
(`baselines`, `agent`, `registry`), the multi-replica simulator (`sim`, `replica`), its metrics
and `run_cluster` (`run`). See docs/routers.md."""
