"""Integrations with other frameworks. Each subpackage imports its framework, so
it is imported only by applications that use it (`chit[django]`)."""
