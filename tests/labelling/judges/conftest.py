"""The engine tests' fault app and openai engine fixtures, for the judges that run on a server."""

from tests.lm.engines.conftest import engine_for, fault_server, no_outside_server  # noqa: F401  (fixtures)
