"""esp's benchmarks, apart from the product: what `esp bench …` runs and how its figures are made.

The product packages (elasticity, pipelines, orchestration) never import this package; only the
`esp` command line's root mounts its `bench` command group. Results land in `benchmarks/results/`.
"""
