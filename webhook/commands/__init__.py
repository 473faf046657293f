"""One module per `draquota` subcommand, each with `configure(parser)` and `run(args) -> int`."""
