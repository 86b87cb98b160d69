"""Loopback fakes of the services the gateway talks to; each records what it received."""
