"""One module per role of the dataflow; each exposes `main(args) -> int`, and `add_arguments(parser)` when it takes
options (the others take everything from SURREAL_* variables and the experiment config)."""
