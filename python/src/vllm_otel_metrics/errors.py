"""The plugin's one error: a setting, or a file it names, that cannot be
used. Its own module, so that the modules that raise it (:mod:`.config`,
:mod:`.private`, :mod:`.slo`) need not import one another."""


class ConfigError(ValueError):
    """A setting that cannot be used; the message names the variable."""
