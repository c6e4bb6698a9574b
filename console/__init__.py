"""What every command shares to talk to the operator: the output settings (`context`), rendering
of tables, plain text, markdown and JSON (`render`, `writers_chart`), the exit codes and the
messages of errors (`exit_codes`, `errors`), and the config file (`config`). Below the commands,
above the core: `cli -> commands -> console -> operations -> inspectors` (docs/development.md)."""
