"""The arguments of the command being run, as `xmemplan.cli.main.run` received them (the
run folder's command.txt records them)."""

ARGV: list[str] = []
