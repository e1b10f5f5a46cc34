"""One module per role of the dataflow; each exposes `add_arguments(parser)` and `main(args) -> int`."""
