"""A plugin module: importing it registers the toy (an entry point may name a module)."""

from tests.federation.toy_method import register

register()
